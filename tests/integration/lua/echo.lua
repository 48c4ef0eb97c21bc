-- echo.lua: answers its key and its arguments as given (tests: binary safety, "..." in ARGV).
-- KEYS: key
-- ARGV: first ...
local out = { KEYS[1] }
for i = 1, #ARGV do
	out[#out + 1] = ARGV[i]
end
return out
