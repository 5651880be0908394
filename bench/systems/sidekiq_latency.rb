# Ruby Sidekiq's job for bench/latency.py: it records its latency (perform start - push time) in a local file, no
# Redis call. kiq's twin: bench/systems/latency_jobs.py.
#   worker: sidekiq -r ./bench/systems/sidekiq_latency.rb -c 10 -q default   (REDIS_URL, BENCH_LATENCY_FILE set)
require "sidekiq"

Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.logger.level = Logger::WARN

LATENCY_OUT = File.open(ENV.fetch("BENCH_LATENCY_FILE", File::NULL), "a")
LATENCY_OUT.sync = true # one write per line, whole lines from every thread

class BenchFileLatency
  include Sidekiq::Worker

  def perform(pushed_at)
    LATENCY_OUT.write(format("%.6f\n", Time.now.to_f - pushed_at))
  end
end
