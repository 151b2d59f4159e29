
# 440_pg_cron.pl - pg_cron (Debian's postgresql-15-cron) on two PostgreSQL
# clusters A and B pointing at one ZooKeeper, the same job scheduled every
# minute on both, guarded in three ways: zk_try_lease('cron-lease', '50
# seconds'), zk_is_leader('cron') (both clusters stand in the election
# 'cron' through zklock.elections), and zk_try_semaphore('cron-sem', 1) held
# for the job's transaction (at most one at a time).
#
#   1. The first slot: each job runs on both clusters (pg_cron records a
#      succeeded run on each), and does its work on exactly one of them;
#      the semaphore's job (3 s of work) never runs on both at once.
#   2. The election's leader is stopped (immediate, as in a crash): the next
#      slot's work of both jobs is done by the other cluster (the session
#      timeout, 4 s, is well within the slot).
#   3. ZKLOCK_CRON_MINUTES (default 2) above 2: the stopped cluster comes
#      back and, for the remaining slots, each slot's work of each job is
#      done exactly once across both.
#
# The default run waits for two minute boundaries (about two minutes); the
# longer run is opt-in.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $T0 = time();
my $MINUTES = $ENV{ZKLOCK_CRON_MINUTES} // 2;
my $zk = zk_start();
my $conf = "shared_preload_libraries = 'zklock,pg_cron'\n"
  . "cron.database_name = 'postgres'\n"
  . "cron.use_background_workers = on\n"
  . "max_worker_processes = 16\n"
  . "zklock.elections = 'cron'\n";
my %opts = (session_timeout => '4s', connect_timeout => '2s', conf => $conf);
my %node = (A => zk_node('cronA', $zk, %opts), B => zk_node('cronB', $zk, %opts));

my %JOB = (
	lease => q{INSERT INTO runs(job, slot) SELECT 'lease', date_trunc('minute', clock_timestamp())
	            WHERE zk_try_lease('cron-lease', '50 seconds')},
	leader => q{INSERT INTO runs(job, slot) SELECT 'leader', date_trunc('minute', clock_timestamp())
	             WHERE zk_is_leader('cron')});
# at most one at a time (a semaphore of 1 held for the job's transaction)
my $SEMJOB = q{DO $d$ BEGIN
  IF zk_try_semaphore('cron-sem', 1) THEN
    INSERT INTO spans(t0) VALUES (clock_timestamp());
    PERFORM pg_sleep(3);
    UPDATE spans SET t1 = clock_timestamp() WHERE t1 IS NULL;
  END IF;
END $d$};
my @JOBS = sort keys %JOB;
# not just before a minute boundary, so that both clusters have the job
# loaded for the first slot
{
	my $sec = time() % 60;
	sleep(62 - $sec) if $sec >= 45;
}
foreach my $c (qw(A B))
{
	$node{$c}->safe_psql('postgres', qq{
		CREATE EXTENSION pg_cron;
		CREATE TABLE runs (job text, slot timestamptz, ran_at timestamptz DEFAULT clock_timestamp());
		SELECT cron.schedule('by-lease', '* * * * *', \$job\$$JOB{lease}\$job\$);
		SELECT cron.schedule('by-leader', '* * * * *', \$job\$$JOB{leader}\$job\$);
		CREATE TABLE spans (t0 timestamptz, t1 timestamptz);
		SELECT cron.schedule('by-semaphore', '* * * * *', \$job\$$SEMJOB\$job\$);
	});
}
note sprintf('scheduled at %s', scalar(localtime));

# "job slot" (slot in epoch seconds) => [clusters that did the work]
sub work
{
	my @up = @_;
	my %w;
	foreach my $c (@up)
	{
		my $out = $node{$c}->safe_psql('postgres',
			"SELECT job || ' ' || extract(epoch FROM slot)::bigint FROM runs ORDER BY slot");
		push @{ $w{$_} }, $c foreach grep { $_ ne '' } split /\n/, $out;
	}
	return %w;
}

# the slots (epoch seconds) in which pg_cron ran the job successfully on $c
sub cron_runs
{
	my ($c) = @_;
	my $out = $node{$c}->safe_psql('postgres',
		"SELECT j.jobname || ' ' || extract(epoch FROM date_trunc('minute', d.start_time))::bigint"
		  . " FROM cron.job_run_details d JOIN cron.job j USING (jobid)"
		  . " WHERE d.status = 'succeeded' ORDER BY 1");
	return map { $_ => 1 } grep { $_ ne '' } split /\n/, $out;
}

#
# 1. the first slot: run on both, work done once
#
my %w;
ok(wait_until(sub { %w = work(qw(A B)); scalar(keys %w) >= 2 }, 90, 0.5),
	'the first slot came and both jobs did their work');
my ($s1) = sort map { (split / /)[1] } keys %w;
sleep 5;    # the other cluster's runs of the same slot
%w = work(qw(A B));
my %ra = cron_runs('A');
my %rb = cron_runs('B');
foreach my $j (@JOBS)
{
	my $k = "$j $s1";
	is(scalar(@{ $w{$k} // [] }), 1, "slot 1, $j: the work was done once (on " . join(',', @{ $w{$k} // [] }) . ')');
	ok($ra{"by-$j $s1"} && $rb{"by-$j $s1"}, "slot 1, $j: pg_cron ran the job on both clusters")
	  or diag "A ran " . join(',', sort keys %ra) . "; B ran " . join(',', sort keys %rb);
}

# the semaphore's job: never two at once, across both clusters
sub spans
{
	my @sp;
	foreach my $c (@_)
	{
		push @sp, map { [ split /\|/ ] } grep { $_ ne '' } split /\n/,
		  $node{$c}->safe_psql('postgres',
			"SELECT extract(epoch FROM t0), extract(epoch FROM coalesce(t1, 'infinity')) FROM spans");
	}
	return sort { $a->[0] <=> $b->[0] } @sp;
}
my @sp = spans(qw(A B));
ok(scalar(@sp) >= 1, 'slot 1, semaphore: the job did its work (' . scalar(@sp) . ' span(s))');
my @overlap = grep { $sp[$_][0] < $sp[ $_ - 1 ][1] } 1 .. $#sp;
is(scalar(@overlap), 0, 'slot 1, semaphore: never two at once');

#
# 2. the election's leader is stopped: the other does the next slot's work
#
my $leader = $node{A}->safe_psql('postgres', "SELECT zk_is_leader('cron')") eq 't' ? 'A' : 'B';
is($w{"leader $s1"}[0] // '', $leader, "slot 1: the leader's job ran on the leader ($leader)");
my $other = $leader eq 'A' ? 'B' : 'A';
$node{$leader}->stop('immediate');
note "stopped $leader after slot 1";
my $s2 = $s1 + 60;
ok(wait_until(sub { %w = work($other); $w{"lease $s2"} && $w{"leader $s2"} }, 90, 0.5),
	"slot 2: both jobs' work was done by $other");

#
# 3. optional: more slots with both clusters up
#
if ($MINUTES > 2)
{
	$node{$leader}->start;
	my $last = $s2 + 60 * ($MINUTES - 2);
	ok(wait_until(sub { %w = work(qw(A B)); $w{"lease $last"} && $w{"leader $last"} },
			60 * ($MINUTES - 2) + 60, 1),
		"the remaining slots came");
	sleep 5;
	%w = work(qw(A B));
	my @later = grep { (split / /)[1] > $s2 } sort keys %w;
	my @bad = map { "$_: " . join(',', @{ $w{$_} }) } grep { @{ $w{$_} } != 1 } @later;
	is(join('; ', @bad), '', scalar(@later) . " later slot runs, each done exactly once");
	is(scalar(@later), 2 * ($MINUTES - 2), 'and no slot was skipped');
}

$_->stop('fast', fail_ok => 1) foreach values %node;
zk_stop($zk);
note sprintf('440_pg_cron: %.1fs', time() - $T0);
done_testing();
