# Sidekiq 8's Profiles page, read from a Redis kiq wrote to: the reads of Sidekiq 8.1.7's ProfileSet and
# ProfileRecord (lib/sidekiq/api.rb) and of its Web UI's /profiles/:key/data route (lib/sidekiq/web/application.rb),
# on the redis gem (Sidekiq 8 itself is not installed here):
#
#   REDIS_URL=unix:///path/redis.sock ruby tests/ruby/profiles.rb
#
# Prints one JSON document per profile: what that page shows of it, and what its Data button serves.
require "json"
require "zlib"
require "redis"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

redis = Redis.new(url: ENV.fetch("REDIS_URL"))
# ProfileSet#initialize: throw away the expired profiles, then newest to oldest
redis.zremrangebyscore("profiles", "-inf", Time.now.to_f.to_s)
keys = redis.zrevrangebyscore("profiles", "+inf", 0)
fetch_keys = %w[started_at jid type token size elapsed].freeze
keys.map { |key| redis.hmget(key, *fetch_keys) }.compact.each do |arr|
  # ProfileRecord#initialize: the conversions a malformed field would make raise
  started_at = Time.at(Integer(arr[0]))
  jid, type, token = arr[1], arr[2], arr[3]
  size = Integer(arr[4])
  elapsed = Float(arr[5])
  key = "#{token}-#{jid}" # ProfileRecord#key
  data = redis.hget(key, "data") # served with content-encoding gzip, as the Firefox Profiler's JSON
  # as bytes, as the route serves them: the redis gem tags the string UTF-8, and Zlib.gunzip misreads such a
  # string when the gzip header's time bytes read as a character ("invalid block type")
  profile = JSON.parse(Zlib.gunzip(data.b))
  puts JSON.generate(
    "key" => key, "started_at" => started_at.to_i, "type" => type, "jid" => jid, "token" => token,
    "size" => size, "data_bytes" => data.bytesize, "elapsed" => elapsed,
    "product" => profile["meta"]["product"], "threads" => profile["threads"].size
  )
end
