package redislimit

// Lua (Redis scripting, Lua 5.1) has only float64 numbers, exact for integers
// up to 2^53. Unix ns times are about 2^61, so the scripts never hold a time in
// one number: a time is a pair (h, l) = h*2^32 + l with 0 <= l < 2^32, sent by
// the Go side and stored as two hash fields. Differences of times are computed
// from the pairs and are exact below 2^52 (farther ones are "far", only compared
// or, when a duration would need them, refused with a "RINGLIMIT clock step"
// error). Durations and counts are bounded by MaxDuration and MaxCount (2^51),
// validated in Go before a script runs, so every sum stays below 2^53; the
// products that could exceed it (SlidingWindowCounter's prev*(Period-elapsed) and
// (r+1)*Period) are computed with muldiv, a shift-and-add floor(a*b/m) that keeps
// every intermediate below 2^53; TokenBucket keeps its token*ns debt as
// q*Period + r. Divisions use math.fmod, which is exact on doubles.
//
// Every script takes KEYS[1] and ARGV: kind, now_h, now_l, hits, limit, period,
// burst, grace_ms, then per-algorithm values precomputed in Go (see Limiter.args),
// and replies {allowed (0|1), limit, remaining, retry_after_ns (-1: never),
// reset_after_ns}. The key is a hash: k (the algo.Kind number) and the state
// fields a..d; a key of another kind is deleted and read as fresh, by every
// check (peeks and denied ones too), as algo.State.Take starts a fresh state.
// Only an admitted check writes, then sets PEXPIRE to ResetAfter (rounded up to
// ms) plus grace_ms.

// prelude holds the helpers every script shares.
const prelude = `
local B = 4294967296
local FAR = 4503599627370496
local TWO53 = 9007199254740992
local function s(x) return string.format('%.0f', x) end
local function diff(ah, al, bh, bl)
  local dh = ah - bh
  if dh >= 1048576 then return FAR end
  if dh <= -1048576 then return -FAR end
  local d = dh * B + (al - bl)
  if d >= FAR then return FAR end
  if d <= -FAR then return -FAR end
  return d
end
local function add(h, l, d)
  local x = l + d
  local lo = x % B
  return h + (x - lo) / B, lo
end
local function idiv(a, b) return (a - math.fmod(a, b)) / b end
local function cdiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r ~= 0 then q = q + 1 end
  return q
end
local function muldiv(a, b, m)
  local p = a * b
  if p < TWO53 then return idiv(p, m), math.fmod(p, m) end
  local qa = idiv(a, m)
  local ra = a - qa * m
  local q = qa * b
  local bits, n = {}, 0
  while b > 0 do
    local bit = b % 2
    n = n + 1
    bits[n] = bit
    b = (b - bit) / 2
  end
  local q2, r = 0, 0
  for i = n, 1, -1 do
    q2 = q2 * 2
    if r >= m - r then r = r - (m - r); q2 = q2 + 1 else r = r + r end
    if bits[i] == 1 then
      if r >= m - ra then r = r - (m - ra); q2 = q2 + 1 else r = r + ra end
    end
  end
  return q + q2, r
end
local function pmod(h, l, p)
  local r = math.fmod(h, p)
  if r < 0 then r = r + p end
  for i = 1, 32 do
    if r >= p - r then r = r - (p - r) else r = r + r end
  end
  return math.fmod(r + l, p)
end
local function near(d)
  if d >= FAR or d <= -FAR then
    return redis.error_reply('RINGLIMIT clock step: now is too far before the key state')
  end
  return nil
end
local function expire(key, reset, grace)
  redis.call('PEXPIRE', key, s(cdiv(reset, 1000000) + grace))
end
local key = KEYS[1]
local kind = tonumber(ARGV[1])
local nh, nl = tonumber(ARGV[2]), tonumber(ARGV[3])
local hits, limit, period, burst = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local grace = tonumber(ARGV[8])
local st = redis.call('HMGET', key, 'k', 'a', 'b', 'c', 'd', 'e')
local fresh = tonumber(st[1]) ~= kind
if fresh and st[1] then redis.call('DEL', key) end
`

// gcraScript is algo.GCRAState: ARGV[9] = T, ARGV[10] = tau.
const gcraScript = prelude + `
local t, tau = tonumber(ARGV[9]), tonumber(ARGV[10])
local cap = burst + 1
local ttl = 0
if not fresh then
  local d = diff(tonumber(st[2]), tonumber(st[3]), nh, nl)
  if d >= FAR then return near(d) end
  if d > 0 then ttl = d end
end
local allowed, retry, rem = 0, 0, 0
if hits == 0 then
  allowed = 1
elseif hits > cap then
  retry = -1
elseif ttl > tau - t * hits then
  retry = ttl - (tau - t * hits)
else
  allowed = 1
  ttl = ttl + t * hits
  local th, tl = add(nh, nl, ttl)
  redis.call('HSET', key, 'k', s(kind), 'a', s(th), 'b', s(tl))
  expire(key, ttl, grace)
end
if ttl < tau then rem = idiv(tau - ttl, t) end
return {allowed, cap, rem, retry, ttl}
`

// tokenBucketScript is algo.TokenBucketState. algo keeps the debt in token*ns
// (missing tokens times Period), which can pass 2^53; the script keeps it as
// q*Period + r (0 <= r < Period): field a = q, d = r, e = the Period they are
// expressed in (a different Period reinterprets the same token*ns amount, as
// algo does), b, c = the last refill time.
const tokenBucketScript = prelude + `
local p = period
local function range()
  return redis.error_reply('RINGLIMIT range: the key state is outside the exact range under this limit')
end
-- ceil((dq*p + dr) / limit), nil when it is not exact
local function need(dq, dr)
  if dq == 0 then return cdiv(dr, limit) end
  local a, b = muldiv(dq, p, limit)
  if a >= FAR then return nil end
  return a + cdiv(b + dr, limit)
end
local eh, el = nh, nl
local lag, q, r = 0, 0, 0
if not fresh then
  q, r = tonumber(st[2]), tonumber(st[5])
  local pe = tonumber(st[6])
  if pe ~= p then
    local a, b = 0, 0
    if q > 0 then a, b = muldiv(q, pe, p) end
    if a >= FAR then return range() end
    local x = b + r
    q, r = a + idiv(x, p), math.fmod(x, p)
  end
  local lh, ll = tonumber(st[3]), tonumber(st[4])
  local d = diff(nh, nl, lh, ll)
  if d < 0 then
    local e = near(d)
    if e then return e end
    lag, eh, el, d = -d, lh, ll, 0
  end
  if q > 0 or r > 0 then
    local full = need(q, r)
    if not full then return range() end
    if d >= full then
      q, r = 0, 0
    else
      local q2, r2 = muldiv(limit, d, p)
      q, r = q - q2, r - r2
      if r < 0 then q, r = q - 1, r + p end
    end
  end
end
local allowed, retry, rem = 0, 0, 0
if hits == 0 then
  allowed = 1
elseif hits > burst then
  retry = -1
elseif q > burst - hits or (q == burst - hits and r > 0) then
  retry = need(q - (burst - hits), r)
  if not retry then return range() end
else
  allowed = 1
  q = q + hits
end
if q < burst then
  rem = burst - q
  if r > 0 then rem = rem - 1 end
end
local reset = need(q, r)
if not reset then return range() end
if allowed == 1 and hits > 0 then
  redis.call('HSET', key, 'k', s(kind), 'a', s(q), 'b', s(eh), 'c', s(el), 'd', s(r), 'e', s(p))
  expire(key, reset, grace)
end
if lag ~= 0 then
  if retry > 0 then retry = retry + lag end
  if reset > 0 then reset = reset + lag end
end
return {allowed, burst, rem, retry, reset}
`

// fixedWindowScript is algo.FixedWindowState: ARGV[9], ARGV[10] = the pair of
// the start of now's window, now - floorMod(now, Period).
const fixedWindowScript = prelude + `
local p = period
local sh, sl = tonumber(ARGV[9]), tonumber(ARGV[10])
local count = 0
if not fresh then
  local oh, ol = tonumber(st[2]), tonumber(st[3])
  count = tonumber(st[4])
  local c = diff(sh, sl, oh, ol)
  if c ~= 0 or sh ~= oh or sl ~= ol then
    if c > 0 or count == 0 then
      count = 0
    elseif diff(nh, nl, oh, ol) < 0 then
      -- before the stored window: decided in the window holding its start
      local m = pmod(oh, ol, p)
      sh, sl = add(oh, ol, -m)
    end
  end
end
local endd = diff(sh, sl, nh, nl)
local e = near(endd)
if e then return e end
endd = endd + p
local allowed, retry, rem, reset = 0, 0, limit, 0
if hits == 0 then
  allowed = 1
elseif hits > limit then
  retry = -1
elseif hits > limit - count then
  retry = endd
else
  allowed = 1
  count = count + hits
  redis.call('HSET', key, 'k', s(kind), 'a', s(sh), 'b', s(sl), 'c', s(count))
  expire(key, endd, grace)
end
if count > 0 then
  rem = limit - count
  if rem < 0 then rem = 0 end
  reset = endd
end
return {allowed, limit, rem, retry, reset}
`

// slidingWindowCounterScript is algo.SlidingWindowCounterState: ARGV[9],
// ARGV[10] = the pair of now's window start, ARGV[11] = floorMod(now, Period).
const slidingWindowCounterScript = prelude + `
local p = period
local ws, wl, ec = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local oh, ol, prev, cur = 0, 0, 0, 0
if not fresh then
  oh, ol, prev, cur = tonumber(st[2]), tonumber(st[3]), tonumber(st[4]), tonumber(st[5])
end
local lag = 0
if (prev > 0 or cur > 0) then
  local d = diff(nh, nl, oh, ol)
  if d < 0 then
    local e = near(d)
    if e then return e end
    lag = -d
    ec = pmod(oh, ol, p)
    ws, wl = add(oh, ol, -ec)
  end
end
-- advance to the window starting at (ws, wl)
local c = diff(ws, wl, oh, ol)
if ws == oh and wl == ol then
elseif c < 0 then
  oh, ol = ws, wl
elseif c <= p then
  oh, ol, prev, cur = ws, wl, cur, 0
else
  oh, ol, prev, cur = ws, wl, 0, 0
end
local function weighted(cnt, w)
  if cnt == 0 or w == 0 then return 0 end
  local q = muldiv(cnt, w, p)
  return q
end
local function fadeAt(cnt, r)
  local q, rem = muldiv(r + 1, p, cnt)
  if rem ~= 0 then q = q + 1 end
  return p - q + 1
end
local est = weighted(prev, p - ec) + cur
local allowed, retry, rem = 0, 0, 0
if hits == 0 then
  allowed = 1
elseif hits > limit then
  retry = -1
elseif est > limit or hits > limit - est then
  local r = limit - hits - cur
  if r >= 0 then
    retry = fadeAt(prev, r) - ec
  else
    retry = p - ec + fadeAt(cur, limit - hits)
  end
else
  allowed = 1
  cur = cur + hits
  est = est + hits
end
if est < limit then rem = limit - est end
local reset = 0
if cur > 0 then
  reset = p - ec + fadeAt(cur, 0)
elseif prev > 0 then
  reset = fadeAt(prev, 0) - ec
  if reset < 0 then reset = 0 end
end
if allowed == 1 and hits > 0 then
  redis.call('HSET', key, 'k', s(kind), 'a', s(oh), 'b', s(ol), 'c', s(prev), 'd', s(cur))
  expire(key, reset, grace)
end
if lag ~= 0 then
  if retry > 0 then retry = retry + lag end
  if reset > 0 then reset = reset + lag end
end
return {allowed, limit, rem, retry, reset}
`

// slidingWindowLogScript is algo.SlidingWindowLogState. The log is field a: runs
// of 12 bytes, struct '>i4I4I4' (h, l, count of hits admitted at that time),
// oldest first; a check that admits hits at the time of the newest run adds to it.
const slidingWindowLogScript = prelude + `
local p = period
local th, tl, tm, n = {}, {}, {}, 0
if not fresh and st[2] then
  local raw = st[2]
  local pos = 1
  while pos <= #raw do
    n = n + 1
    th[n], tl[n], tm[n], pos = struct.unpack('>i4I4I4', raw, pos)
  end
end
local eh, el = nh, nl
if n > 0 then
  local d = diff(th[n], tl[n], nh, nl)
  if d > 0 then
    local e = near(d)
    if e then return e end
    eh, el = th[n], tl[n]
  end
end
-- the runs from lo on count: t > eff - p
local lo = n + 1
for i = 1, n do
  if diff(th[i], tl[i], eh, el) > -p then lo = i break end
end
local count = 0
for i = lo, n do count = count + tm[i] end
local allowed, retry, rem, reset = 0, 0, 0, 0
if hits == 0 then
  allowed = 1
elseif hits > limit then
  retry = -1
elseif hits > limit - count then
  local k = count + hits - limit
  local acc = 0
  for i = lo, n do
    acc = acc + tm[i]
    if acc >= k then
      retry = diff(th[i], tl[i], nh, nl) + p
      break
    end
  end
else
  allowed = 1
  local out = {}
  for i = lo, n do
    out[#out + 1] = struct.pack('>i4I4I4', th[i], tl[i], tm[i])
  end
  if lo <= n and th[n] == eh and tl[n] == el then
    out[#out] = struct.pack('>i4I4I4', eh, el, tm[n] + hits)
  else
    out[#out + 1] = struct.pack('>i4I4I4', eh, el, hits)
  end
  count = count + hits
  n, lo = 1, 1
  th[1], tl[1] = eh, el
  redis.call('HSET', key, 'k', s(kind), 'a', table.concat(out))
end
rem = limit - count
if rem < 0 then rem = 0 end
if count > 0 then
  reset = diff(th[n], tl[n], nh, nl) + p
  if allowed == 1 and hits > 0 then expire(key, reset, grace) end
end
return {allowed, limit, rem, retry, reset}
`
