
# 440_pg_cron.pl - pg_cron (Debian's postgresql-15-cron) on two PostgreSQL
# clusters A and B pointing at one ZooKeeper, the same job scheduled every
# minute on both, guarded by zk_try_lease('cron-lease', '50 seconds').
#
#   1. The first slot: the job runs on both clusters (pg_cron records a
#      succeeded run on each), and does its work on exactly one of them.
#   2. The cluster that did the work is stopped (immediate, as in a crash):
#      the next slot's work is done by the other one.
#   3. ZKLOCK_CRON_MINUTES (default 2) above 2: the stopped cluster comes
#      back and, for the remaining slots, each slot's work is done exactly
#      once across both.
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
  . "max_worker_processes = 16\n";
my %opts = (session_timeout => '4s', connect_timeout => '2s', conf => $conf);
my %node = (A => zk_node('cronA', $zk, %opts), B => zk_node('cronB', $zk, %opts));

my $JOB = q{INSERT INTO runs(slot) SELECT date_trunc('minute', clock_timestamp())
             WHERE zk_try_lease('cron-lease', '50 seconds')};
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
		CREATE TABLE runs (slot timestamptz, ran_at timestamptz DEFAULT clock_timestamp());
		SELECT cron.schedule('guarded', '* * * * *', \$job\$$JOB\$job\$);
	});
}
note sprintf('scheduled at %s', scalar(localtime));

# slot (epoch seconds) => [clusters that did the work]
sub work
{
	my @up = @_;
	my %w;
	foreach my $c (@up)
	{
		my $out = $node{$c}->safe_psql('postgres',
			"SELECT extract(epoch FROM slot)::bigint FROM runs ORDER BY slot");
		push @{ $w{$_} }, $c foreach grep { $_ ne '' } split /\n/, $out;
	}
	return %w;
}

# the slots (epoch seconds) in which pg_cron ran the job successfully on $c
sub cron_runs
{
	my ($c) = @_;
	my $out = $node{$c}->safe_psql('postgres',
		"SELECT extract(epoch FROM date_trunc('minute', start_time))::bigint FROM cron.job_run_details"
		  . " WHERE status = 'succeeded' ORDER BY 1");
	return map { $_ => 1 } grep { $_ ne '' } split /\n/, $out;
}

#
# 1. the first slot: run on both, work done once
#
my %w;
ok(wait_until(sub { %w = work(qw(A B)); scalar(keys %w) >= 1 }, 90, 0.5),
	'the first slot came and the job did its work');
my ($s1) = sort keys %w;
sleep 5;    # the other cluster's run of the same slot
%w = work(qw(A B));
is(join(',', @{ $w{$s1} }), $w{$s1}[0], "slot 1: the work was done once (on $w{$s1}[0])");
my %ra = cron_runs('A');
my %rb = cron_runs('B');
ok($ra{$s1} && $rb{$s1}, 'slot 1: pg_cron ran the job on both clusters (succeeded on each)')
  or diag "A ran in " . join(',', keys %ra) . "; B in " . join(',', keys %rb);

#
# 2. the cluster that did the work is stopped: the other takes the next slot
#
my $winner = $w{$s1}[0];
my $other = $winner eq 'A' ? 'B' : 'A';
$node{$winner}->stop('immediate');
note "stopped $winner after slot 1";
my $s2 = $s1 + 60;
ok(wait_until(sub { %w = work($other); $w{$s2} }, 90, 0.5),
	"slot 2: the work was done by $other");

#
# 3. optional: more slots with both clusters up
#
if ($MINUTES > 2)
{
	$node{$winner}->start;
	my $last = $s2 + 60 * ($MINUTES - 2);
	ok(wait_until(sub { %w = work(qw(A B)); $w{$last} }, 60 * ($MINUTES - 2) + 60, 1),
		"the remaining slots came");
	sleep 5;
	%w = work(qw(A B));
	my @bad = map { "$_: " . join(',', @{ $w{$_} }) }
	  grep { $_ > $s2 && @{ $w{$_} } != 1 } sort keys %w;
	my $n = grep { $_ > $s2 } keys %w;
	is(join('; ', @bad), '', "each of the $n later slots' work done exactly once");
	is($n, $MINUTES - 2, 'and no slot was skipped');
}

$_->stop('fast', fail_ok => 1) foreach values %node;
zk_stop($zk);
note sprintf('440_pg_cron: %.1fs', time() - $T0);
done_testing();
