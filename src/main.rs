use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = xmc::cli::Cli::parse();
    match xmc::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
