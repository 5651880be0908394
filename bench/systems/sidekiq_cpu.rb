# Ruby Sidekiq's CPU-bound benchmark job (python -m bench --processes): each job spins BENCH_SPIN_SECONDS
# (default 0.001) of its own thread's CPU time in a tight loop, like bench/systems/kiq_cpu.py.
#   worker: sidekiq -r ./bench/systems/sidekiq_cpu.rb -c 10 -q default   (REDIS_URL set by the harness)
#   pusher: ruby bench/systems/sidekiq_cpu.rb bulk COUNT                  (the protocol of common.py)
require_relative "sidekiq_jobs"

SPIN_SECONDS = Float(ENV.fetch("BENCH_SPIN_SECONDS", "0.001"))

def thread_cpu
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
end

class BenchSpin
  include Sidekiq::Worker

  def perform(index)
    target = thread_cpu + SPIN_SECONDS
    nil while thread_cpu < target
  end
end

if $PROGRAM_NAME == __FILE__
  abort "only bulk pushes: ruby #{__FILE__} bulk COUNT" unless ARGV[0] == "bulk"
  count = Integer(ARGV[1])
  started = monotonic
  (0...count).map { |index| [index] }.each_slice(BULK_BATCH) do |slice|
    Sidekiq::Client.push_bulk("class" => BenchSpin, "args" => slice)
  end
  puts JSON.generate(seconds: monotonic - started, count: count, version: Sidekiq::VERSION, note: "")
end
