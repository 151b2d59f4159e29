
# 440_pg_cron.pl - pg_cron (Debian's postgresql-15-cron) on two PostgreSQL
# clusters A and B pointing at one ZooKeeper, the same job scheduled every
# minute on both, guarded in three ways: zk_try_lease('cron-lease', '50
# seconds'), zk_is_leader('cron') (both clusters stand in the election
# 'cron' through zklock.elections), and zk_try_semaphore('cron-sem', 2) held
# for the job's transaction (at most two at once; scheduled twice on each
# cluster, so four runs contend for two leases every slot).
#
#   1. The first slot: each job runs on both clusters (pg_cron records a
#      succeeded run on each), and does its work on exactly one of them;
#      the semaphore's jobs (20 s of work) do theirs exactly twice, never
#      more than two at once.
#   2. The election's leader is stopped (immediate, as in a crash): the next
#      slot's work of both jobs is done by the other cluster (the session
#      timeout, 4 s, is well within the slot).
#   3. ZKLOCK_CRON_MINUTES (default 2) above 2: the stopped cluster comes
#      back and, for the remaining slots, each slot's work of each job is
#      done exactly once across both, and the semaphore's work at most
#      twice per slot and never more than two at once.
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

# pg_cron for this PostgreSQL: Debian's postgresql-15-cron and
# postgresql-17-cron (tools/deps.sh, tools/pg.sh); none for tools/pg.sh's
# PostgreSQL 18 on Debian 12 (Debian's archive here serves no pg-cron source
# package, and sid's postgresql-18-cron needs a newer C library)
my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => "pg_cron is not installed for this PostgreSQL ($sharedir/extension/pg_cron.control)"
  unless -f "$sharedir/extension/pg_cron.control";

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
# at most two at once (a semaphore of 2 held for the job's transaction)
my $SEMJOB = q{DO $d$ DECLARE i bigint; BEGIN
  IF zk_try_semaphore('cron-sem', 2) THEN
    INSERT INTO spans(slot, t0) VALUES (date_trunc('minute', clock_timestamp()), clock_timestamp())
      RETURNING id INTO i;
    PERFORM pg_sleep(20);
    UPDATE spans SET t1 = clock_timestamp() WHERE id = i;
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
		CREATE TABLE spans (id bigserial, slot timestamptz, t0 timestamptz, t1 timestamptz);
		SELECT cron.schedule('by-semaphore-1', '* * * * *', \$job\$$SEMJOB\$job\$);
		SELECT cron.schedule('by-semaphore-2', '* * * * *', \$job\$$SEMJOB\$job\$);
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
# every job of the slot finished on both clusters (pg_cron records a run when
# its launcher hears of it, which may be once the slot's longest job ended)
my (%ra, %rb);
my @want = map { "by-$_ $s1" } (@JOBS, 'semaphore-1', 'semaphore-2');
ok(wait_until(sub { %ra = cron_runs('A'); %rb = cron_runs('B');
			!grep { !$ra{$_} || !$rb{$_} } @want }, 60, 0.5),
	'slot 1: pg_cron ran every job on both clusters')
  or diag "A ran " . join(',', sort keys %ra) . "; B ran " . join(',', sort keys %rb);
%w = work(qw(A B));
foreach my $j (@JOBS)
{
	my $k = "$j $s1";
	is(scalar(@{ $w{$k} // [] }), 1, "slot 1, $j: the work was done once (on " . join(',', @{ $w{$k} // [] }) . ')');
}

# the semaphore's jobs: never more than two at once, across both clusters;
# spans [slot, t0, t1] in epoch seconds
sub spans
{
	my @sp;
	foreach my $c (@_)
	{
		push @sp, map { [ split /\|/ ] } grep { $_ ne '' } split /\n/,
		  $node{$c}->safe_psql('postgres',
			"SELECT extract(epoch FROM slot)::bigint, extract(epoch FROM t0),"
			  . " extract(epoch FROM coalesce(t1, 'infinity')) FROM spans");
	}
	return sort { $a->[1] <=> $b->[1] } @sp;
}

# the most spans running at one instant
sub most_at_once
{
	my @ev = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
	  map { ([ $_->[1], 1 ], [ $_->[2], -1 ]) } @_;
	my ($n, $max) = (0, 0);
	foreach my $e (@ev)
	{
		$n += $e->[1];
		$max = $n if $n > $max;
	}
	return $max;
}
ok(wait_until(sub { my @x = grep { $_->[0] == $s1 && $_->[2] ne 'Infinity' } spans(qw(A B)); @x >= 2 },
		60, 0.5), 'slot 1, semaphore: two runs finished their work');
my @sp = spans(qw(A B));
is(scalar(grep { $_->[0] == $s1 } @sp), 2,
	'slot 1, semaphore: four runs contended, exactly two did the work');
is(most_at_once(@sp), 2, 'slot 1, semaphore: never more than two at once');

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
	ok(wait_until(sub { grep { $_->[0] == $last } spans(qw(A B)) }, 60, 1),
		"the semaphore's work of the last slot finished");
	@sp = grep { $_->[0] > $s2 } spans(qw(A B));
	my %per;
	$per{ $_->[0] }++ foreach @sp;
	is(join(',', grep { $per{$_} > 2 } sort keys %per), '', 'semaphore: at most twice in every later slot');
	cmp_ok(most_at_once(@sp), '<=', 2, 'semaphore: never more than two at once');
	is(scalar(keys %per), $MINUTES - 2, 'semaphore: its work was done in every later slot');
}

$_->stop('fast', fail_ok => 1) foreach values %node;
zk_stop($zk);
note sprintf('440_pg_cron: %.1fs', time() - $T0);
done_testing();
