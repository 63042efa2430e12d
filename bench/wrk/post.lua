-- POST one JSON body per request (or GET, BENCH_METHOD) and report JSON on exit (parsed by
-- bench/harness/wrk.py).
--
-- Environment (read once per thread):
--   BENCH_BODY     the body; every "{{N}}" becomes a value unique to this request (thread id + a
--                  counter), so SendMessage messageIds and JSON-RPC ids never repeat
--   BENCH_HEADERS  extra headers, one "Name: value" per line
--   BENCH_ROTATE   optional values, one a line; "{{KEY}}" in a header becomes the next one per
--                  request (e.g. 16 API keys, to spread requests over 16 Subjects)
--   BENCH_OK       a substring every good response body contains (e.g. TASK_STATE_COMPLETED);
--                  a response without it counts as "bad", as does any non-2xx status
-- Output: one line "BENCH_JSON {...}" with requests, duration, latency percentiles (microseconds)
-- and the per-thread counts of good and bad responses.

local threads = {}
local counter = 0
local body_template = os.getenv("BENCH_BODY") or ""
local ok_marker = os.getenv("BENCH_OK") or ""
local method = os.getenv("BENCH_METHOD") or "POST"
local headers = {}
for line in string.gmatch(os.getenv("BENCH_HEADERS") or "", "[^\n]+") do
  local name, value = string.match(line, "^%s*([^:]+):%s*(.-)%s*$")
  if name then headers[name] = value end
end
if method ~= "GET" then headers["Content-Type"] = headers["Content-Type"] or "application/json" end
local rotate = {}
for line in string.gmatch(os.getenv("BENCH_ROTATE") or "", "[^\n]+") do table.insert(rotate, line) end

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  -- thread_id is this thread's global, set by setup(); every thread's Lua state starts with the
  -- same random seed, so the id (not the random part) is what keeps threads' values apart.
  math.randomseed(os.time() * 1000 + (thread_id or 0))
  good = 0
  bad = 0
  first_bad = ""
end

function request()
  counter = counter + 1
  local body = string.gsub(body_template, "{{N}}", tostring(thread_id or 0) .. "-" .. tostring(counter) .. "-" .. tostring(math.random(1, 1000000000)))
  local sent = headers
  if #rotate > 0 then
    local value = rotate[(counter % #rotate) + 1]
    sent = {}
    for name, v in pairs(headers) do sent[name] = string.gsub(v, "{{KEY}}", value) end
  end
  if method == "GET" then return wrk.format("GET", nil, sent, nil) end
  return wrk.format(method, nil, sent, body)
end

function response(status, hdrs, body)
  if status >= 200 and status < 300 and (ok_marker == "" or string.find(body, ok_marker, 1, true)) then
    good = good + 1
  else
    bad = bad + 1
    if first_bad == "" then first_bad = tostring(status) .. " " .. string.sub(body or "", 1, 300) end
  end
end

local function quote(s)
  s = string.gsub(s, '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end)
  return '"' .. s .. '"'
end

function done(summary, latency, requests)
  local good_total, bad_total, sample = 0, 0, ""
  for _, thread in ipairs(threads) do
    good_total = good_total + (thread:get("good") or 0)
    bad_total = bad_total + (thread:get("bad") or 0)
    local fb = thread:get("first_bad") or ""
    if sample == "" and fb ~= "" then sample = fb end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"good":%d,"bad":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.1f,"max":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d},"first_bad":%s}\n',
    summary.requests, summary.duration, summary.bytes, good_total, bad_total,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    quote(sample)))
end
