# Rails ActiveJob (Debian's ruby-activejob, 6.1) over Sidekiq, for tests/test_interop_activejob.py:
#
#   REDIS_URL=... sidekiq -r /abs/path/tests/ruby/activejob.rb -q aj_ruby    # runs the Rails jobs below
#   REDIS_URL=... ruby tests/ruby/activejob.rb COMMAND '[JSON params]'       # enqueues, or reads a retry entry
#
# Every run of a Rails job is recorded in Redis with a description of each argument's Ruby class and value.
require "json"
require "sidekiq"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=) # ruby-redis 4.8's warnings
require "sidekiq/api"
require "active_support"
require "active_support/time"
require "active_job"
require "active_job/queue_adapters/sidekiq_adapter"
require "global_id"
require "bigdecimal"

ActiveJob::Base.queue_adapter = :sidekiq
ActiveJob::Base.logger = Logger.new(nil)
Time.zone = "Europe/Berlin" # so a TimeWithZone argument has a zone of its own
GlobalID.app = "kiqtest"

module AjInterop
  RUNS = "interop:activejob:ruby:runs"

  # A JSON description of a Ruby value: its class and a comparable value (hash keys keep whether they are symbols).
  def self.describe(value)
    case value
    when Hash
      {"type" => value.class.name, "value" => value.to_h { |k, v| [k.is_a?(Symbol) ? ":#{k}" : k, describe(v)] }}
    when Array then value.map { |item| describe(item) }
    when ActiveSupport::Duration then {"type" => "Duration", "value" => value.to_i}
    when BigDecimal then {"type" => "BigDecimal", "value" => value.to_s("F")}
    when ActiveSupport::TimeWithZone, DateTime, Time then {"type" => value.class.name, "value" => value.iso8601(6)}
    when Date then {"type" => "Date", "value" => value.iso8601}
    when Symbol then {"type" => "Symbol", "value" => value.to_s}
    when Account then {"type" => "Account", "value" => value.id}
    else value
    end
  end

  def self.record(job, args, kwargs)
    run = {"job_id" => job.job_id, "jid" => job.provider_job_id, "class" => job.class.name,
           "queue" => job.queue_name, "priority" => job.priority, "executions" => job.executions,
           "args" => describe(args), "kwargs" => describe(kwargs)}
    Sidekiq.redis { |conn| conn.rpush(RUNS, JSON.generate(run)) }
  end
end

# A record GlobalID can name and find (no database: the id is all it has).
class Account
  include GlobalID::Identification
  attr_reader :id

  def initialize(id)
    @id = id.to_s
  end

  def self.find(id) = new(id)
end

Sidekiq.configure_server do |config|
  settings = config.respond_to?(:options) ? config.options : config # Sidekiq 6 : Sidekiq 7
  settings[:poll_interval_average] = 1
end

# Enqueued from Python: records what it received.
class RailsEcho < ActiveJob::Base
  queue_as "aj_ruby"

  def perform(*args, **kwargs)
    AjInterop.record(self, args, kwargs)
  end
end

class RailsInteropError < StandardError; end

# Enqueued from Python: fails on its first run, records like RailsEcho on the next (a retry from kiq's API).
class RailsFlaky < RailsEcho
  def perform(*args, **kwargs)
    attempts = Sidekiq.redis { |conn| conn.hincrby("interop:activejob:ruby:attempts", job_id, 1) }
    raise RailsInteropError, "first attempt in Rails" if attempts == 1
    super
  end
end

# The Ruby stand-ins of the Python jobs (tests/jobs/activejob.py): enqueued here, run in Python.
class ReportJob < ActiveJob::Base
  queue_as "aj_kiq"
end

# Records like RailsEcho when Ruby runs it: only by the "execute_retry" command (a Python failure's retry entry).
class FlakyReportJob < RailsEcho
  queue_as "aj_kiq"
end

ARGUMENTS = [
  7, 2.5, "x", nil, true, [1, [2]],
  {"a" => 1, b: {c: :d}},
  ActiveSupport::HashWithIndifferentAccess.new("e" => 1),
  :sym,
  Date.new(2026, 11, 25),
  Time.utc(2026, 11, 25, 9, 16, 38, 123456),
  DateTime.new(2026, 11, 25, 10, 0, 0, "+02:00"),
  Time.zone.local(2026, 11, 25, 12, 30, 15),
  90.minutes,
  BigDecimal("12.3456789012345678901"),
  Account,
  Account.new(42)
].freeze

def perform_later(params)
  job_class = Object.const_get(params.fetch("class", "ReportJob"))
  configured = params["wait"] ? job_class.set(wait: params["wait"]) : job_class
  job = configured.perform_later(*ARGUMENTS, when: Date.new(2026, 12, 1), mode: :fast)
  {"job_id" => job.job_id, "jid" => job.provider_job_id}
end

if $PROGRAM_NAME == __FILE__
  Sidekiq.logger = Logger.new($stderr) # stdout is the JSON answer
  command, params = ARGV[0], JSON.parse(ARGV[1] || "[]")
  result =
    case command
    when "perform_later" then perform_later(params[0] || {})
    when "execute_retry" # Rails runs a retry entry's envelope, as its Sidekiq JobWrapper would
      entry = Sidekiq::RetrySet.new.find_job(params[0])
      ActiveJob::Base.execute(entry.args[0].merge("provider_job_id" => entry.jid))
      {"executed" => entry.item["class"]}
    else abort "unknown command #{command.inspect}"
    end
  puts JSON.generate(result)
end
