"""Lua scripts: every quota decision is one atomic Redis call, so parallel requests can't race.

Per tenant (keys share the `{tenant}` hash tag, so they live in one Redis Cluster slot):
  rpm, tpm   token buckets: HASH {tokens, ts}; capacity = the per-minute limit, refilled
             continuously at limit/60 per second. Burst of K, then a steady K per minute.
  conc       ZSET of open request ids, scored by an expiry (a crashed API can't leak slots)
  conc:dur   how long a request holds a slot, a moving average in seconds (the concurrency
             refusal's Retry-After: when the oldest open request should end)
  m:YYYYMM   tokens charged this calendar month (seeded from Postgres if missing)
  batch      tokens of admitted batch work not yet finished
  res:<id>   HASH: one admission's reservation, deleted by whoever settles it first
             (the worker at job end, or the API when a request ends without the worker)

Limits are passed as numbers; -1 means "no limit".
"""

from __future__ import annotations

# KEYS: rpm, tpm, conc, month, batch, res, policy generation
# ARGV: now, rpm, tpm, conc, monthly, batch_limit, tokens, member, conc_expiry, is_batch,
#       use_conc, res_ttl, month_ttl, alert_level, expected policy generation ('' = any)
# Returns {1, alert_crossed, requests left, tokens left, generation} on admit (-1: no such
#         limit; the buckets after this admission, for the x-ratelimit headers);
#         {0, reason, retry_after_ms, requests left, tokens left, used, generation} on refusal
#         (the buckets as they are, nothing taken; used: what the refusing limit counts, for
#         concurrent requests, batch tokens and the month, else -1);
#         {-1, generation} when the month counter must be seeded first;
#         {-2, generation} when the limits were read under another policy generation than
#         the tenant's current one (service.quotas.door_policy): nothing taken.
ADMIT = """
local generation = tonumber(redis.call('GET', KEYS[7]) or '0')
if ARGV[15] ~= '' and tonumber(ARGV[15]) ~= generation then return {-2, generation} end
local now = tonumber(ARGV[1])
local rpm, tpm, conc = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local monthly, batch_limit = tonumber(ARGV[5]), tonumber(ARGV[6])
local need = tonumber(ARGV[7])
local member = ARGV[8]
local is_batch, use_conc = ARGV[10] == '1', ARGV[11] == '1'

local function bucket(key, cap)
  local b = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens, ts = tonumber(b[1]), tonumber(b[2])
  if tokens == nil then return cap end
  return math.min(cap, tokens + math.max(0, now - ts) * cap / 60.0)
end

if monthly >= 0 and redis.call('EXISTS', KEYS[4]) == 0 then return {-1, generation} end

local rpm_left, tpm_left = 0, 0
if rpm >= 0 then rpm_left = bucket(KEYS[1], rpm) end
if tpm >= 0 then tpm_left = bucket(KEYS[2], tpm) end
local function refuse(reason, retry_ms, counted)
  local req, tok = -1, -1
  if rpm >= 0 then req = math.max(0, math.floor(rpm_left)) end
  if tpm >= 0 then tok = math.max(0, math.floor(tpm_left)) end
  return {0, reason, retry_ms, req, tok, counted, generation}
end

if use_conc and conc >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local open = redis.call('ZCARD', KEYS[3])
  if open >= conc then
    -- When a slot frees: the typical request's length (conc:dur, kept by SETTLE) less the
    -- oldest open request's age (its expiry score less this request's slot lifetime, the
    -- door gives every request the same), bounded to 1-60 s; 1 s without a history yet.
    local retry_ms = 1000
    local typical = tonumber(redis.call('GET', KEYS[3] .. ':dur') or '')
    if typical then
      local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
      local age = 0
      if oldest[2] then
        age = math.max(0, (tonumber(ARGV[9]) - now) - (tonumber(oldest[2]) - now))
      end
      retry_ms = math.min(60000, math.max(1000, math.ceil((typical - age) * 1000)))
    end
    return refuse('concurrent_requests', retry_ms, open)
  end
end
if rpm >= 0 and rpm_left < 1 then
  if rpm == 0 then return refuse('requests_per_minute', 60000, -1) end
  return refuse('requests_per_minute', math.ceil((1 - rpm_left) * 60000 / rpm), -1)
end
if tpm >= 0 and tpm_left < need then
  if need > tpm then return refuse('tokens_per_minute_exceeds_limit', 60000, -1) end
  return refuse('tokens_per_minute', math.ceil((need - tpm_left) * 60000 / tpm), -1)
end
if is_batch and batch_limit >= 0 then
  local queued = tonumber(redis.call('GET', KEYS[5]) or '0')
  if queued + need > batch_limit then return refuse('batch_enqueued_tokens', 60000, queued) end
end
local used = 0
if monthly >= 0 then
  used = tonumber(redis.call('GET', KEYS[4]) or '0')
  if used + need > monthly then return refuse('monthly_tokens', 0, used) end
end

if rpm >= 0 then
  redis.call('HSET', KEYS[1], 'tokens', rpm_left - 1, 'ts', now)
  redis.call('EXPIRE', KEYS[1], 120)
end
if tpm >= 0 then
  redis.call('HSET', KEYS[2], 'tokens', tpm_left - need, 'ts', now)
  redis.call('EXPIRE', KEYS[2], 120)
end
if use_conc then
  redis.call('ZADD', KEYS[3], tonumber(ARGV[9]), member)
  redis.call('EXPIRE', KEYS[3], math.ceil(tonumber(ARGV[9]) - now) + 60)
end
if is_batch then redis.call('INCRBY', KEYS[5], need) end
-- Count the month only while a budget applies (or was seeded): a counter started mid-month
-- without a seed would undercount if a budget is set later; a missing one gets seeded then.
local after = used
if monthly >= 0 or redis.call('EXISTS', KEYS[4]) == 1 then
  after = redis.call('INCRBY', KEYS[4], need)
  redis.call('EXPIRE', KEYS[4], tonumber(ARGV[13]))
end
redis.call('HSET', KEYS[6], 'tokens', need, 'batch', ARGV[10], 'member', member,
           'tpm', tpm, 'month', KEYS[4], 'start', now)
redis.call('EXPIRE', KEYS[6], tonumber(ARGV[12]))
local alert = tonumber(ARGV[14])
local crossed = 0
if alert >= 0 and used < alert and after >= alert then crossed = 1 end
local req_left, tok_left = -1, -1
if rpm >= 0 then req_left = math.floor(rpm_left - 1) end
if tpm >= 0 then tok_left = math.floor(tpm_left - need) end
return {1, crossed, req_left, tok_left, generation}
"""

# Correct an admission to real usage. Idempotent: the reservation is deleted on first use.
# KEYS: res, tpm, conc, batch   ARGV: now, actual_tokens, [slot member to free regardless]
# Returns the reserved tokens, or -1 if there was nothing to settle.
SETTLE = """
local freed = 0
if ARGV[3] then freed = redis.call('ZREM', KEYS[3], ARGV[3]) end
local r = redis.call('HMGET', KEYS[1], 'tokens', 'batch', 'member', 'tpm', 'month', 'start')
if r[1] == false then
  return -1
end
redis.call('DEL', KEYS[1])
local reserved, actual = tonumber(r[1]), tonumber(ARGV[2])
local delta = actual - reserved
local cap = tonumber(r[4])
if cap >= 0 then
  local b = redis.call('HMGET', KEYS[2], 'tokens', 'ts')
  if b[1] then
    -- Refund (or charge) the difference; a bucket may go below zero, which is debt that
    -- the refill pays off before the next admission.
    local now = tonumber(ARGV[1])
    local tokens = math.min(cap, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * cap / 60.0)
    redis.call('HSET', KEYS[2], 'tokens', math.min(cap, tokens - delta), 'ts', now)
  end
end
freed = freed + redis.call('ZREM', KEYS[3], r[3])
if freed > 0 and r[6] then
  -- How long the tenant's requests hold a slot (a moving average, seconds), for the
  -- concurrency refusal's Retry-After.
  local took = math.max(0, tonumber(ARGV[1]) - tonumber(r[6]))
  local typical = tonumber(redis.call('GET', KEYS[3] .. ':dur') or '')
  if typical then took = typical * 0.8 + took * 0.2 end
  redis.call('SET', KEYS[3] .. ':dur', took, 'EX', 86400)
end
if r[2] == '1' then redis.call('DECRBY', KEYS[4], reserved) end
if redis.call('EXISTS', r[5]) == 1 then redis.call('INCRBY', r[5], delta) end
return reserved
"""

# ADMIT, and on an admission the request's express hand-off in the same call: one
# Redis round trip at the door where there were two in a row, the quota then the hand-off's
# XADD): the model's next lent ticket (``keys.express_key``, ``<worker>|<ticket>``) is popped
# and the hand-off entry added to that worker's stream, so the worker starts the engine while
# the API still waits for this reply. A refusal, a stale policy or a missing month counter
# takes no ticket. An entry Redis refuses (its stream not a stream, memory full) places
# nothing, and its ticket is dropped (the lender forgets it; the next request should not try
# the same stream): the job then goes the dispatcher's way. The stream's key is
# known only once the ticket is popped, so it is not among KEYS: this script needs one Redis
# (or one shard), unlike the rest, whose keys share their tenant's hash tag.
# KEYS: ADMIT's, then the express list   ARGV: ADMIT's, then the hand-off stream's prefix, its
# approximate MAXLEN, and the entry's field/value pairs
# Returns {ticket or '', ADMIT's reply}
ADMIT_AND_HAND_OFF = """
local function admit()
""" + ADMIT + """
end
local out = admit()
if out[1] ~= 1 then return {'', out} end
local raw = redis.call('LPOP', KEYS[8])
if not raw then return {'', out} end
local worker = string.match(raw, '^(.+)|[^|]+$')
if not worker then return {'', out} end  -- not a ticket: dropped, as the lender's TTL would
local added = redis.pcall('XADD', ARGV[16] .. worker, 'MAXLEN', '~', ARGV[17], '*',
                          unpack(ARGV, 18))
if type(added) == 'table' and added.err then return {'', out} end
return {raw, out}
"""
