# Ruby Sidekiq's client and API, driven by tests/test_interop_ruby.py against a Redis shared with kiq:
#
#   REDIS_URL=unix:///path/redis.sock ruby tests/ruby/client.rb COMMAND '[JSON params]'
#
# Prints one JSON document: what Ruby's Sidekiq read back or did, through its public API only.
require "json"
require "sidekiq"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=) # ruby-redis 4.8's warnings
require "sidekiq/api"

# A stand-in for the Python job of that wire name (tests/jobs/interop.py); it never runs in Ruby.
class InteropJob
  include Sidekiq::Worker
  sidekiq_options queue: "kiq"
end

SETS = {"schedule" => Sidekiq::ScheduledSet, "retry" => Sidekiq::RetrySet, "dead" => Sidekiq::DeadSet}.freeze

# What Ruby makes of a job record: the payload plus the values its accessors compute from it.
def record(job)
  job.item.merge(
    "ruby_enqueued_at" => job.enqueued_at&.to_f,
    "ruby_created_at" => job.created_at.to_f,
    "ruby_error_backtrace" => job.error_backtrace
  )
end

def entry(set_name, jid)
  SETS.fetch(set_name).new.find_job(jid)
end

def process_record(process)
  keys = %w[identity hostname pid tag concurrency queues busy beat quiet rss rtt_us started_at]
  keys.to_h { |key| [key, process[key]] }.merge("labels" => process.labels, "stopping" => process.stopping?)
end

def stats
  stats = Sidekiq::Stats.new
  %w[processed failed enqueued scheduled_size retry_size dead_size processes_size workers_size]
    .to_h { |name| [name, stats.public_send(name)] }
end

command, params = ARGV[0], JSON.parse(ARGV[1] || "[]")
result =
  case command
  when "push" then {"jid" => Sidekiq::Client.push(params[0])}
  when "perform_async" then {"jid" => InteropJob.perform_async(*params)}
  when "perform_in" then {"jid" => InteropJob.perform_in(params[0], *params[1..])}
  when "queue" then Sidekiq::Queue.new(params[0]).map { |job| record(job).merge("ruby_latency" => job.latency) }
  when "find" then (found = entry(*params)) && record(found).merge("score" => found.score, "error" => found.error?)
  when "retry" then {"retried" => !!entry(*params)&.retry}
  when "processes" then Sidekiq::ProcessSet.new.map { |process| process_record(process) }
  when "workers" then Sidekiq::Workers.new.map { |process, thread, work| {"process" => process, "thread" => thread, "work" => work} }
  when "stats" then stats
  when "quiet", "stop"
    process = Sidekiq::ProcessSet.new.find { |candidate| candidate.identity == params[0] }
    command == "quiet" ? process&.quiet! : process&.stop!
    {"found" => !process.nil?}
  else abort "unknown command #{command.inspect}"
  end
puts JSON.generate(result)
