# Ruby Sidekiq's benchmark jobs and pusher.
#   worker: sidekiq -r ./bench/systems/sidekiq_jobs.rb -c 10 -q default   (REDIS_URL set by the harness)
#   pusher: ruby bench/systems/sidekiq_jobs.rb MODE COUNT [--rate R]      (the protocol of common.py)
require "json"
require "sidekiq"

# redis-rb 4.8 warns about deprecated calls Sidekiq 6.4 makes; printing them would slow Sidekiq down
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.logger.level = Logger::WARN

LATENCY_KEY = "bench:latency"
BULK_BATCH = 1000 # Sidekiq 7's push_bulk batch size, and kiq's: one round trip per 1,000 jobs

class BenchNoop
  include Sidekiq::Worker

  def perform(index); end
end

class BenchLatency
  include Sidekiq::Worker

  def perform(enqueued_at)
    started = Time.now.to_f
    Sidekiq.redis { |conn| conn.rpush(LATENCY_KEY, started - enqueued_at) }
  end
end

def monotonic
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def push(mode, count, rate)
  bulk_args = mode == "bulk" ? (0...count).map { |index| [index] } : []
  started = monotonic
  case mode
  when "single"
    count.times { |index| BenchNoop.perform_async(index) }
  when "bulk"
    bulk_args.each_slice(BULK_BATCH) { |slice| Sidekiq::Client.push_bulk("class" => BenchNoop, "args" => slice) }
  when "latency" # the first push before the schedule starts, as common.py's pace does
    BenchLatency.perform_async(Time.now.to_f) if count.positive?
    paced = monotonic
    (count - 1).times do |index|
      delay = paced + index / rate - monotonic
      sleep(delay) if delay > 0
      BenchLatency.perform_async(Time.now.to_f)
    end
  else
    abort "unknown mode #{mode}"
  end
  seconds = monotonic - started
  puts JSON.generate(seconds: seconds, count: count, version: Sidekiq::VERSION, note: "")
end

if $PROGRAM_NAME == __FILE__
  rate = ARGV[2] == "--rate" ? Float(ARGV[3]) : 100.0
  push(ARGV[0], Integer(ARGV[1]), rate)
end
