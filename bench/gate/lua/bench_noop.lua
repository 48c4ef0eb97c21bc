-- bench_noop.lua: the floor under gate_admit.lua (bench/gate): an EVALSHA with the admission's
-- keys and arguments that does nothing, so the table shows what the decision itself costs.
-- KEYS: gen_key state slots wait sys
-- ARGV: gen call flags agent ...
return 1
