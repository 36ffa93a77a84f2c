-- wrk script for the server benchmark's saturation runs: POST one AdmissionReview, as fast as answers come.
--
--   WRK_REVIEW_FILE=review.json WRK_REVIEW_UID=<its uid> wrk -t1 -c8 -d3s -s bench/wrk_review.lua https://HOST:PORT/mutate
--
-- The request is built once (method, headers and body set at load time), so wrk does no Lua work per request
-- to send it. Each answer must be a 200 that echoes the review's uid; others are counted as `bad`. When the run
-- ends, one line `WRK-JSON {...}` gives the counts and the latency percentiles (microseconds) for bench/server.py.

local review_file = assert(os.getenv("WRK_REVIEW_FILE"), "set WRK_REVIEW_FILE to an AdmissionReview JSON file")
local uid = assert(os.getenv("WRK_REVIEW_UID"), "set WRK_REVIEW_UID to the review's uid")

local handle = assert(io.open(review_file, "rb"))
wrk.method = "POST"
wrk.body = handle:read("*a")
handle:close()
wrk.headers["Content-Type"] = "application/json"

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   bad = 0
   bad_sample = ""
end

function response(status, headers, body)
   if status ~= 200 or not string.find(body, uid, 1, true) then
      bad = bad + 1
      if bad_sample == "" then
         bad_sample = status .. " " .. string.sub(body, 1, 200)
      end
   end
end

function done(summary, latency, requests)
   local bad_total, sample = 0, ""
   for _, thread in ipairs(threads) do
      bad_total = bad_total + thread:get("bad")
      if sample == "" then
         sample = thread:get("bad_sample")
      end
   end
   sample = string.gsub(sample, '[%c"\\]', " ")  -- keep the line valid JSON
   local e = summary.errors
   io.write(string.format(
      'WRK-JSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect_errors": %d, "read_errors": %d, '
         .. '"write_errors": %d, "status_errors": %d, "timeouts": %d, "bad": %d, "bad_sample": "%s", '
         .. '"p50_us": %d, "p99_us": %d, "p999_us": %d, "max_us": %d}\n',
      summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
      bad_total, sample, latency:percentile(50.0), latency:percentile(99.0), latency:percentile(99.9), latency.max))
end
