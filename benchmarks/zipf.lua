-- zipf.lua: a wrk script that asks for a different link each request, in
-- the order a recorded stream gives (benchmarks/zipf writes one: a
-- seven-character code a line, drawn Zipf over the seeded links).
--
--   go run ./benchmarks/zipf -links 10000000 -s 1.0 -n 1000000 -seed 1 >stream
--   ZIPF_STREAM=stream ZIPF_THREADS=2 wrk -t2 -c50 -d10s -s benchmarks/zipf.lua http://127.0.0.1:8080
--
-- ZIPF_THREADS must equal wrk's -t: the stream is cut into that many equal
-- slices, and thread i (from 0) asks for the codes of slice i in order, so
-- the threads never ask for the same draw twice. A thread that comes to the
-- end of its slice starts it again, and done() says so: give a longer stream.
--
-- wrk reports only statuses outside 200-399, so a redirect answered with
-- 200 (or 301, or 304) would pass unseen; response() counts every status
-- but 302, and done() prints them:
--   zipf.lua: responses not 302: N [status=count ...]
--   zipf.lua: thread I: slice from line S, L lines, R requests generated
-- (lines are numbered from 1; the thread's requests are lines S, S+1, ...;
-- the count includes a request wrk generates once before the run to check
-- the script, and the requests still in flight at the end).

local threads = {}

function setup(thread)
   thread:set("id", #threads)
   table.insert(threads, thread)
end

function init(args)
   local path = os.getenv("ZIPF_STREAM")
   local nthreads = tonumber(os.getenv("ZIPF_THREADS") or "")
   if not path or path == "" then
      error("zipf.lua: set ZIPF_STREAM to a file of seven-character codes, one a line")
   end
   if not nthreads or nthreads < 1 or id >= nthreads then
      error("zipf.lua: set ZIPF_THREADS to wrk's -t")
   end
   -- Every line is a code of seven characters and a newline (what
   -- benchmarks/zipf prints), so this thread's slice is one read at a
   -- known offset: init is quick, and wrk's first thread, already running
   -- while the last one reads, gets little time alone. (wrk starts its
   -- clock once every thread has started.)
   local f, err = io.open(path, "rb")
   if not f then error("zipf.lua: " .. err) end
   local size = f:seek("end")
   if size == 0 or size % 8 ~= 0 then
      error("zipf.lua: " .. path .. " is not lines of seven-character codes")
   end
   local total = size / 8
   local share = math.floor(total / nthreads)
   if share < 1 then
      error("zipf.lua: " .. path .. " has " .. total .. " lines, fewer than ZIPF_THREADS")
   end
   first = id * share + 1
   f:seek("set", (first - 1) * 8)
   local data = f:read(share * 8)
   f:close()
   if not data or #data ~= share * 8 then
      error("zipf.lua: " .. path .. ": short read")
   end
   -- Seven characters of 0-9A-Za-z, then a newline, line after line. (A
   -- plain loop: LuaJIT compiles it, where a pattern over the whole slice
   -- took a third of a second.)
   local byte = string.byte
   for i = 1, #data do
      local b = byte(data, i)
      local ok
      if i % 8 == 0 then
         ok = b == 10
      else
         ok = (b >= 48 and b <= 57) or (b >= 65 and b <= 90) or (b >= 97 and b <= 122)
      end
      if not ok then
         error("zipf.lua: " .. path .. " line " .. (first + math.floor((i - 1) / 8)) .. " is not a seven-character code")
      end
   end
   -- The slice stays one string; request() cuts the next code out of it.
   -- (Splitting 500,000 lines into a table of strings here took 0.4 s,
   -- while the first thread already ran; reading and checking as above
   -- takes about 0.05 s.)
   codes = data
   count = share
   pos = 1
   sent = 0
   bad = 0
   statuses = {}
end

function request()
   local at = (pos - 1) * 8 + 1
   local path = "/" .. codes:sub(at, at + 6)
   pos = pos + 1
   if pos > count then pos = 1 end
   sent = sent + 1
   return wrk.format("GET", path)
end

function response(status, headers, body)
   if status ~= 302 then
      bad = bad + 1
      local k = tostring(status)
      statuses[k] = (statuses[k] or 0) + 1
   end
end

function done(summary, latency, requests)
   local want = tonumber(os.getenv("ZIPF_THREADS") or "")
   if want ~= #threads then
      io.write(string.format("zipf.lua: WARNING: wrk ran %d threads but ZIPF_THREADS is %s: the slices overlap or go unused\n", #threads, tostring(want)))
   end
   local bad, seen = 0, {}
   for _, t in ipairs(threads) do
      bad = bad + t:get("bad")
      for k, v in pairs(t:get("statuses")) do seen[k] = (seen[k] or 0) + v end
   end
   local list = {}
   for k, v in pairs(seen) do table.insert(list, k .. "=" .. v) end
   table.sort(list)
   io.write(string.format("zipf.lua: responses not 302: %d [%s]\n", bad, table.concat(list, " ")))
   for i, t in ipairs(threads) do
      local sent, count = t:get("sent"), t:get("count")
      io.write(string.format("zipf.lua: thread %d: slice from line %d, %d lines, %d requests generated\n",
         i - 1, t:get("first"), count, sent))
      if sent > count then
         io.write(string.format("zipf.lua: WARNING: thread %d came to the end of its slice and started it again: give a longer stream\n", i - 1))
      end
   end
end
