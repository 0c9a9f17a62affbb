-- misses.lua: a wrk script that asks for a different random well-formed
-- code each request: seven characters of code.go's alphabet, so every
-- request gets past the app's shape check (validCode) and is a lookup. Of
-- 62^7 (3.5 trillion) codes, a database of ten million links holds one in
-- 350,000: nearly every answer is a 404, the flood a scanner or a broken
-- mail campaign sends.
--
-- The codes come from a file made before the run, one a line, so that
-- drawing them costs wrk nothing while it measures:
--
--   tr -dc '0-9A-Za-z' </dev/urandom | fold -w 7 | head -n 2000000 >codes
--   MISSES_STREAM=codes MISSES_THREADS=2 wrk -t2 -c50 -d10s -s benchmarks/misses.lua http://127.0.0.1:8080
--
-- (tr keeps only the 62 characters, each one byte value, so each is
-- equally likely.) MISSES_THREADS must equal wrk's -t: the file is cut into
-- that many slices and thread i asks for the codes of slice i in order; a
-- thread that comes to the end of its slice starts it again, asking for
-- codes it asked before (which the app's negative cache may then answer),
-- and done() warns.
--
-- There is no response() function: with one, wrk hands every response's
-- headers and body to Lua, CPU taken from the cores the app runs on. wrk's own "Non-2xx or 3xx responses" counts the
-- 404s; the statuses exactly are in the app's /metrics
-- (shortener_http_requests_total), which benchmarks/misses.sh reads.

local threads = {}

function setup(thread)
   thread:set("id", #threads)
   table.insert(threads, thread)
end

function init(args)
   local path = os.getenv("MISSES_STREAM")
   local nthreads = tonumber(os.getenv("MISSES_THREADS") or "")
   if not path or path == "" then
      error("misses.lua: set MISSES_STREAM to a file of seven-character codes, one a line")
   end
   if not nthreads or nthreads < 1 or id >= nthreads then
      error("misses.lua: set MISSES_THREADS to wrk's -t")
   end
   local f, err = io.open(path, "rb")
   if not f then error("misses.lua: " .. err) end
   local size = f:seek("end")
   if size == 0 or size % 8 ~= 0 then
      error("misses.lua: " .. path .. " is not lines of seven-character codes")
   end
   local share = math.floor(size / 8 / nthreads)
   if share < 1 then error("misses.lua: " .. path .. " has fewer lines than MISSES_THREADS") end
   f:seek("set", id * share * 8)
   local data = f:read(share * 8)
   f:close()
   if not data or #data ~= share * 8 then error("misses.lua: " .. path .. ": short read") end
   local byte = string.byte
   for i = 1, #data do
      local b = byte(data, i)
      local ok
      if i % 8 == 0 then
         ok = b == 10
      else
         ok = (b >= 48 and b <= 57) or (b >= 65 and b <= 90) or (b >= 97 and b <= 122)
      end
      if not ok then error("misses.lua: " .. path .. " holds a line that is not a seven-character code") end
   end
   codes = data
   count = share
   pos = 1
   wrapped = 0
   -- The request as wrk.format would write it, made once around the
   -- code: wrk.format builds it from tables on every call (step 15's doc
   -- measures what that costs). MISSES_WRK_FORMAT=1 uses wrk.format, to
   -- compare.
   slow = os.getenv("MISSES_WRK_FORMAT") == "1"
   head = "GET /"
   tail = " HTTP/1.1\r\nHost: " .. wrk.host .. ":" .. wrk.port .. "\r\n\r\n"
end

function request()
   local at = (pos - 1) * 8 + 1
   pos = pos + 1
   if pos > count then pos = 1; wrapped = wrapped + 1 end
   if slow then return wrk.format("GET", "/" .. codes:sub(at, at + 6)) end
   return head .. codes:sub(at, at + 6) .. tail
end

function done(summary, latency, requests)
   local want = tonumber(os.getenv("MISSES_THREADS") or "")
   if want ~= #threads then
      io.write(string.format("misses.lua: WARNING: wrk ran %d threads but MISSES_THREADS is %s\n", #threads, tostring(want)))
   end
   for _, t in ipairs(threads) do
      if t:get("wrapped") > 0 then
         io.write(string.format("misses.lua: WARNING: thread %d came to the end of its slice: codes were asked for again\n", t:get("id")))
      end
   end
end
