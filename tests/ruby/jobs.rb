# The Ruby side of tests/test_interop_ruby.py, run by a real Sidekiq process:
#
#   REDIS_URL=unix:///path/redis.sock sidekiq -r /abs/path/tests/ruby/jobs.rb -q ruby -c 3
#
# The jobs listen on the "ruby" queue (kiq's jobs on "kiq"); every run is written to Redis as JSON, where the
# Python test reads it back. Key names match tests/jobs/interop.py.
require "json"
require "sidekiq"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=) # ruby-redis 4.8's warnings
require "sidekiq/api"

module Interop
  RUBY_RUNS = "interop:ruby:runs"
  RELEASE = "interop:ruby:release:"

  def self.record(job, args)
    run = {"jid" => job.jid, "class" => job.class.name, "args" => args, "queue" => "ruby"}
    Sidekiq.redis { |conn| conn.rpush(RUBY_RUNS, JSON.generate(run)) }
  end
end

Sidekiq.configure_server do |config|
  # Poll the schedule and retry sets about every second (default: every 5 s per process), so tests are quick.
  settings = config.respond_to?(:options) ? config.options : config # Sidekiq 6 : Sidekiq 7
  settings[:poll_interval_average] = 1
end

class RubyInteropError < StandardError; end

# Pushed from Python by name; records its arguments.
class RubyEcho
  include Sidekiq::Worker
  sidekiq_options queue: "ruby"

  def perform(*args)
    Interop.record(self, args)
  end
end

# Always fails, with a backtrace; its next retry is far away, so it stays in the retry set while tests look.
class RubyFail
  include Sidekiq::Worker
  sidekiq_options queue: "ruby", retry: 3, backtrace: true
  sidekiq_retry_in { |_count, _exception| 3600 }

  def perform(*args)
    raise RubyInteropError, "ruby failed with #{args.inspect}"
  end
end

# Keeps a Sidekiq thread busy until the test pushes to RELEASE + token (at most 20 s).
class RubyBlock
  include Sidekiq::Worker
  sidekiq_options queue: "ruby"

  def perform(token)
    Sidekiq.redis { |conn| conn.blpop(Interop::RELEASE + token, timeout: 20) }
    Interop.record(self, [token])
  end
end
