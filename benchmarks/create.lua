-- create.lua: wrk sends POST /shorten with creates.sh's JSON body, so
-- that a create's ratio to /healthz can be read with a generator that
-- costs less than hey (benchmarks/creates.sh, part speed).
wrk.method = "POST"
wrk.body = '{"url":"https://example.com/some/path?q=1"}'
wrk.headers["Content-Type"] = "application/json"
