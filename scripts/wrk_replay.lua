-- wrk script: POSTs the request bodies of a file (one JSON body per line) in turn, so a load test
-- replays a real query distribution instead of one query.
--   wrk -t 2 -c 16 -d 10s -s scripts/wrk_replay.lua http://127.0.0.1:8080/v1/predict -- BODIES
-- scripts/xc_to_requests.py turns an XC-format test split into such a file.
local bodies = {}
local next_body = 1

function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
  -- Each thread starts at its own offset, so threads do not send the same sequence.
  next_body = (math.random(#bodies))
end

function request()
  local body = bodies[next_body]
  next_body = next_body % #bodies + 1
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body)
end
