-- wrk script of bench/serve/run.py: every request is a POST of the file
-- BENCH_BODY (read in binary mode once per wrk thread). Headers come
-- from wrk's -H options.
local path = os.getenv("BENCH_BODY")
local f = assert(io.open(path, "rb"), "cannot open BENCH_BODY " .. tostring(path))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
