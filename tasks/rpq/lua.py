"""The reliable priority queue's Lua scripts: each state transition is one atomic script.

Redis layout under the namespace ``ns`` (one Redis, not a cluster; every transition is one Lua script):

==========================  ====================================================================
``ns:q:{class}|{table}``    sorted set of queued item keys, scored by ``enqueued_at + priority x
                            priority_step`` (lowest first: a lower priority number is served earlier,
                            and an old item eventually overtakes newer higher-priority ones)
``ns:queues``               set of non-empty ``{class}|{table}`` queue names
``ns:item``                 hash: item key -> JSON payload (as first enqueued)
``ns:meta``                 hash: item key -> ``rank|priority|cost|class|table`` (current values)
``ns:score``                hash: item key -> score, to put a leased item back where it was
``ns:lease``                sorted set of leased item keys scored by lease expiry (ms, Redis clock)
``ns:token``                hash: item key -> token of its current lease
``ns:inflight``             hash: table -> number of leased items
``ns:pinflight``            hash: ``table|partition`` (an item key less its ``|kind``) -> number of leased
                            items: two actions on one partition never run at once, whatever their kinds
``ns:delayed``              sorted set of nacked item keys scored by the time they may return (ms)
``ns:deliveries``           hash: item key -> times it has been leased
==========================  ====================================================================

Lease times use the Redis server clock, so consumers on different hosts agree on expiry.
"""

from __future__ import annotations

COMMON = """
local ns = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse(meta)
  return string.match(meta, '^(%d+)|(%d+)|([^|]+)|([^|]+)|(.+)$')
end
local function queue_add(id, cls, tbl, score)
  local qname = cls .. '|' .. tbl
  redis.call('ZADD', ns .. ':q:' .. qname, score, id)
  redis.call('SADD', ns .. ':queues', qname)
end
local function queue_rem(id, cls, tbl)
  local qname = cls .. '|' .. tbl
  local qkey = ns .. ':q:' .. qname
  local n = redis.call('ZREM', qkey, id)
  if redis.call('ZCARD', qkey) == 0 then redis.call('SREM', ns .. ':queues', qname) end
  return n
end
local function requeue(id)
  local _, _, _, cls, tbl = parse(redis.call('HGET', ns .. ':meta', id))
  queue_add(id, cls, tbl, redis.call('HGET', ns .. ':score', id))
end
local function scope(id)
  return string.match(id, '^(.*)|[^|]*$')
end
local function release(id)
  local _, _, _, _, tbl = parse(redis.call('HGET', ns .. ':meta', id))
  redis.call('ZREM', ns .. ':lease', id)
  redis.call('HDEL', ns .. ':token', id)
  if redis.call('HINCRBY', ns .. ':inflight', tbl, -1) <= 0 then redis.call('HDEL', ns .. ':inflight', tbl) end
  local part = scope(id)
  if redis.call('HINCRBY', ns .. ':pinflight', part, -1) <= 0 then redis.call('HDEL', ns .. ':pinflight', part) end
end
-- the first of the queue's first ``window`` items whose partition has no lease, or nil; the head alone
-- is read first (nearly always free: the snapshot reads every queue on each dispatch)
local function first_free(qkey, window)
  local head = redis.call('ZRANGE', qkey, 0, 0)[1]
  if head and not redis.call('HGET', ns .. ':pinflight', scope(head)) then return head end
  for _, id in ipairs(redis.call('ZRANGE', qkey, 1, window - 1)) do
    if not redis.call('HGET', ns .. ':pinflight', scope(id)) then return id end
  end
  return nil
end
local function forget(id)
  redis.call('HDEL', ns .. ':item', id)
  redis.call('HDEL', ns .. ':meta', id)
  redis.call('HDEL', ns .. ':score', id)
  redis.call('HDEL', ns .. ':deliveries', id)
end
local function holds(id, token)
  return redis.call('HGET', ns .. ':token', id) == token
end
"""

# ARGV: ns, id, payload, rank, priority, cost, class, table, score, priority_step
# Returns 1 when the item is new, 0 when it was already there (queued: promoted if the new one is better).
ENQUEUE = COMMON + """
local id, cls, tbl = ARGV[2], ARGV[7], ARGV[8]
local meta = redis.call('HGET', ns .. ':meta', id)
if not meta then
  redis.call('HSET', ns .. ':item', id, ARGV[3])
  redis.call('HSET', ns .. ':meta', id, ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6] .. '|' .. cls .. '|' .. tbl)
  redis.call('HSET', ns .. ':score', id, ARGV[9])
  queue_add(id, cls, tbl, ARGV[9])
  return 1
end
local orank, oprio, ocost, ocls, otbl = parse(meta)
local oscore = redis.call('ZSCORE', ns .. ':q:' .. ocls .. '|' .. otbl, id)
if not oscore then return 0 end
local rank, prio = tonumber(ARGV[4]), tonumber(ARGV[5])
orank, oprio = tonumber(orank), tonumber(oprio)
if not (rank < orank or (rank == orank and cls == ocls and prio < oprio)) then return 0 end
local score = tonumber(oscore) + (prio - oprio) * tonumber(ARGV[10])
queue_rem(id, ocls, otbl)
queue_add(id, cls, otbl, score)
redis.call('HSET', ns .. ':score', id, score)
redis.call('HSET', ns .. ':meta', id, ARGV[4] .. '|' .. ARGV[5] .. '|' .. ocost .. '|' .. cls .. '|' .. otbl)
return 0
"""

# ARGV: ns, class, table, token, lease_ms, per_table_limit (0: none), global_limit (0: none), window
# Leases the first of the queue's first ``window`` items whose partition has no lease ('partition_busy'
# when every one of them has: items of one partition wait for each other, whatever their kinds).
DEQUEUE = COMMON + """
local cls, tbl = ARGV[2], ARGV[3]
local per_table, slots = tonumber(ARGV[6]), tonumber(ARGV[7])
if per_table > 0 and tonumber(redis.call('HGET', ns .. ':inflight', tbl) or '0') >= per_table then
  return {'table_full'}
end
if slots > 0 and redis.call('ZCARD', ns .. ':lease') >= slots then return {'slots_full'} end
local qkey = ns .. ':q:' .. cls .. '|' .. tbl
if redis.call('ZCARD', qkey) == 0 then return {'empty'} end
local id = first_free(qkey, tonumber(ARGV[8]))
if not id then return {'partition_busy'} end
queue_rem(id, cls, tbl)
local expires = now_ms() + tonumber(ARGV[5])
redis.call('ZADD', ns .. ':lease', expires, id)
redis.call('HSET', ns .. ':token', id, ARGV[4])
redis.call('HINCRBY', ns .. ':inflight', tbl, 1)
redis.call('HINCRBY', ns .. ':pinflight', scope(id), 1)
local deliveries = redis.call('HINCRBY', ns .. ':deliveries', id, 1)
return {'ok', id, redis.call('HGET', ns .. ':item', id), redis.call('HGET', ns .. ':meta', id), expires, deliveries}
"""

# ARGV: ns, id, token
ACK = COMMON + """
local id = ARGV[2]
if not holds(id, ARGV[3]) then return 0 end
release(id)
forget(id)
return 1
"""

# ARGV: ns, id, token, delay_ms
NACK = COMMON + """
local id, delay = ARGV[2], tonumber(ARGV[4])
if not holds(id, ARGV[3]) then return 0 end
release(id)
if delay > 0 then
  redis.call('ZADD', ns .. ':delayed', now_ms() + delay, id)
else
  requeue(id)
end
return 1
"""

# ARGV: ns, id, token, lease_ms; returns the new expiry (ms) or 0 when the lease is lost
EXTEND = COMMON + """
local id = ARGV[2]
if not holds(id, ARGV[3]) then return 0 end
local expires = now_ms() + tonumber(ARGV[4])
redis.call('ZADD', ns .. ':lease', 'XX', expires, id)
return expires
"""

# ARGV: ns, limit; returns the number of items put back into their queues
RECLAIM = COMMON + """
local now, limit, n = now_ms(), tonumber(ARGV[2]), 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', ns .. ':lease', '-inf', now, 'LIMIT', 0, limit)) do
  release(id)
  requeue(id)
  n = n + 1
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', ns .. ':delayed', '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', ns .. ':delayed', id)
  requeue(id)
  n = n + 1
end
return n
"""

# ARGV: ns, id; 1 removed, 0 unknown, -1 leased (left alone)
REMOVE = COMMON + """
local id = ARGV[2]
local meta = redis.call('HGET', ns .. ':meta', id)
if not meta then return 0 end
if redis.call('HEXISTS', ns .. ':token', id) == 1 then return -1 end
local _, _, _, cls, tbl = parse(meta)
queue_rem(id, cls, tbl)
redis.call('ZREM', ns .. ':delayed', id)
forget(id)
return 1
"""

# ARGV: ns, window; returns {"qname\tcount\tcost\tbusy" lines, "table\tleases" lines, total leases}:
# flat strings, because parsing a reply of thousands of elements costs the client more than the script.
# ``cost`` is that of the item DEQUEUE would lease; ``busy`` is 1 when the partition of each of the
# queue's first ``window`` items has a lease (DEQUEUE would refuse), else 0.
SNAPSHOT = COMMON + """
local window = tonumber(ARGV[2])
local queues = {}
for _, qname in ipairs(redis.call('SMEMBERS', ns .. ':queues')) do
  local qkey = ns .. ':q:' .. qname
  local n = redis.call('ZCARD', qkey)
  if n > 0 then
    local id = first_free(qkey, window)
    local busy = 0
    if not id then
      id, busy = redis.call('ZRANGE', qkey, 0, 0)[1], 1
    end
    local _, _, cost = parse(redis.call('HGET', ns .. ':meta', id))
    queues[#queues + 1] = qname .. '\\t' .. n .. '\\t' .. cost .. '\\t' .. busy
  end
end
local inflight = redis.call('HGETALL', ns .. ':inflight')
local lines = {}
for i = 1, #inflight, 2 do lines[#lines + 1] = inflight[i] .. '\\t' .. inflight[i + 1] end
return {table.concat(queues, '\\n'), table.concat(lines, '\\n'), redis.call('ZCARD', ns .. ':lease')}
"""
