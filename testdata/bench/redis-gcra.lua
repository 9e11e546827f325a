-- GCRA in Lua the way the seeds do it (redis-cell's semantics, integer microseconds from TIME)
-- KEYS[1]; ARGV: max_burst, count, period (s), quantity
local burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local q = tonumber(ARGV[4] or "1")
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T = math.floor(period * 1000000 / count)
local tau = T * (burst + 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + T * q
local allow_at = new - tau
if now < allow_at then
  return {1, burst + 1, 0, math.ceil((allow_at - now) / 1000000), math.ceil((tat - now) / 1000000)}
end
redis.call('SET', KEYS[1], new, 'PX', math.ceil((new - now) / 1000))
return {0, burst + 1, math.floor((tau - (new - now)) / T), -1, math.ceil((new - now) / 1000000)}
