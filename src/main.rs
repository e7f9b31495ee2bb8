use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = xmc::cli::Cli::parse();
    match xmc::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A closed pipe (`xmc inspect M | head`) is the reader's choice, not a failure.
        Err(err)
            if err.chain().any(|e| {
                e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            std::process::ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
