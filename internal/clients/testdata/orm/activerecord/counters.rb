# ActiveRecord's counter increments, run by the tests in
# internal/clients/orm_test.go.
#
# Usage: ruby counters.rb (Debian's ruby-activerecord 6.1 and ruby-mysql2).
# The environment says where to connect (SP_HOST, SP_PORT, SP_DATABASE,
# SP_USER, SP_PASSWORD) and what to do: SP_WORKERS threads each run
# SP_ITERATIONS increments, cycling through the spellings below, then the
# totals are read back through the ORM. Prints, per spelling and counter,
# "inc ID COLUMN DELTA SCOPE CALLS AFFECTED" (SCOPE "-", "live": deleted_at
# IS NULL, or "tenant=N"; AFFECTED "-" when the ORM does not report it),
# then "total ID COLUMN VALUE" per row and counter.
require "active_record"

def env(name)
  ENV.fetch(name) { abort "counters.rb: #{name} is not set" }
end

WORKERS = Integer(env("SP_WORKERS"))
ITERATIONS = Integer(env("SP_ITERATIONS"))

ActiveRecord::Base.establish_connection(
  adapter: "mysql2", host: env("SP_HOST"), port: Integer(env("SP_PORT")),
  database: env("SP_DATABASE"), username: env("SP_USER"), password: env("SP_PASSWORD"),
  pool: WORKERS + 1, encoding: "utf8mb4"
)
ActiveRecord::Base.default_timezone = :utc

class Repo < ActiveRecord::Base
  self.table_name = "repos"
  has_many :stargazers
end

# The soft-delete default scope (as paranoia and discard add it).
class LiveRepo < ActiveRecord::Base
  self.table_name = "repos"
  default_scope { where(deleted_at: nil) }
end

# A counter cache: creating a Stargazer increments its repo's stars.
class Stargazer < ActiveRecord::Base
  self.table_name = "stargazers"
  belongs_to :repo, counter_cache: :stars
end

# Runs block, a transaction, again after a deadlock (as an application
# must: MySQL rolls the whole transaction back).
def retrying
  attempts = 0
  begin
    yield
  rescue ActiveRecord::Deadlocked, ActiveRecord::LockWaitTimeout
    attempts += 1
    raise if attempts > 5
    retry
  end
end

# [name, [[id, column, delta, scope]], block returning affected rows or nil]
SPELLINGS = [
  ["increment_counter", [[1, "downloads", 1, "-"]], -> { Repo.increment_counter(:downloads, 1) }],
  ["increment_counter-touch", [[1, "downloads", 1, "-"]], -> { Repo.increment_counter(:downloads, 1, touch: true) }],
  ["update_counters", [[1, "downloads", 2, "-"], [1, "stars", 1, "-"]], -> { Repo.update_counters(1, downloads: 2, stars: 1) }],
  # A one-id list is sent as "= 1" by ActiveRecord 6.1; two ids as IN (…).
  ["update_counters-list", [[1, "downloads", 1, "-"]], -> { Repo.update_counters([1], downloads: 1) }],
  ["update_counters-ids", [[1, "stars", 1, "-"], [2, "stars", 1, "-"]], -> { Repo.update_counters([1, 2], stars: 1); nil }],
  ["increment!", [[1, "downloads", 1, "-"]], -> { Repo.find(1).increment!(:downloads); nil }],
  ["counter_cache", [[1, "stars", 1, "-"]], -> { retrying { Stargazer.create!(repo_id: 1) }; nil }],
  ["tenant", [[2, "downloads", 1, "tenant=7"]], -> { Repo.where(tenant_id: 7, id: 2).update_counters(downloads: 1) }],
  ["tenant-other", [[1, "downloads", 1, "tenant=7"]], -> { Repo.where(tenant_id: 7, id: 1).update_counters(downloads: 1) }],
  ["default_scope", [[1, "downloads", 1, "live"]], -> { LiveRepo.where(id: 1).update_counters(downloads: 1) }],
  ["default_scope-deleted", [[3, "downloads", 1, "live"]], -> { LiveRepo.where(id: 3).update_counters(downloads: 1) }],
]

calls = Array.new(WORKERS) { Array.new(SPELLINGS.size, 0) }
affected = Array.new(WORKERS) { Array.new(SPELLINGS.size, 0) }
reported = Array.new(SPELLINGS.size, true)
errors = Queue.new
threads = (0...WORKERS).map do |w|
  Thread.new do
    ActiveRecord::Base.connection_pool.with_connection do
      ITERATIONS.times do |i|
        s = (w + i) % SPELLINGS.size
        n = SPELLINGS[s][2].call
        calls[w][s] += 1
        if n.nil?
          reported[s] = false
        else
          affected[w][s] += n
        end
      end
    end
  rescue Exception => e # report, do not hang
    errors << "worker #{w}: #{e.class}: #{e.message}"
  end
end
threads.each(&:join)
abort Array.new(errors.size) { errors.pop }.join("\n") unless errors.empty?

SPELLINGS.each_with_index do |(_, incs, _), s|
  c = calls.sum { |row| row[s] }
  a = reported[s] ? affected.sum { |row| row[s] }.to_s : "-"
  incs.each { |id, col, delta, scope| puts "inc #{id} #{col} #{delta} #{scope} #{c} #{a}" }
end
Repo.order(:id).each do |repo|
  puts "total #{repo.id} downloads #{repo.downloads}"
  puts "total #{repo.id} stars #{repo.stars}"
end
