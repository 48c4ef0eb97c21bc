-- broken.lua: does not compile (tests: a script the server refuses keeps the connection down).
-- KEYS:
-- ARGV:
return (
