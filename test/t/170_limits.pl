
# 170_limits.pl - no traffic can overflow a fixed-size structure, and
# zklock works at the limits of its settings (issue 6, defects 2 and 10).
#
# - zklock.max_locks = 16 and ZooKeeper unreachable (first zklock.hosts
#   pointing at a closed loopback port, then zklock.hosts = '' by reload),
#   zklock.connect_timeout = 100ms: parallel sessions make thousands of
#   requests of every kind, each failing, far more than 16 during one
#   outage.  The worker must not crash or restart (same pid), the
#   postmaster must not restart the cluster, entries_used returns to 0,
#   and once zklock.hosts names a running ZooKeeper, locks work: the 12
#   entries backends may take (16 less the worker's reserve of 4) can be
#   used at once, the 13th request fails with 53200, and the worker still
#   stands in an election listed then.
# - zklock.max_locks at the largest value the setting accepts (read from
#   pg_settings.max_val): the server starts and the zk_locks view works,
#   empty and with a few locks held.  If that needs more shared memory than
#   this machine can give, the test says how much and uses the largest
#   value that fits.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $closed = '127.0.0.1:' . PostgreSQL::Test::Cluster::get_free_port();
my $node = zk_node('limits', $closed,
	wait => 0,
	connect_timeout => '100ms',
	session_timeout => '10s',
	# as in production: a crash restarts the cluster instead of stopping
	# it, so that the rest of the test can tell what happened
	conf => "zklock.max_locks = 16\nrestart_after_crash = on\n");

is($node->safe_psql('postgres', 'SHOW zklock.max_locks'), '16', 'zklock.max_locks is 16');
is(zk_status_value($node, 'max_locks'), '16', 'zk_status().max_locks is 16');

my $start_time = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $worker = wait_for_worker($node);
ok(defined $worker, "zklock worker runs (pid " . ($worker // 'none') . ')');
my $st = wait_for_state($node, sub { $_[0]->{state} ne 'connected' }, 10);
note "state with zklock.hosts = '$closed' (nothing listens there): $st->{state}";

# Make requests of every kind for $secs seconds, each in its own
# subtransaction so that failures do not stop the loop.  Returns
# "requests succeeded sqlstates".
$node->safe_psql('postgres', q{
CREATE FUNCTION hammer(secs float8, tag text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
	n int := 0;
	ok int := 0;
	codes text[] := '{}';
BEGIN
	WHILE clock_timestamp() < t0 + make_interval(secs => secs) LOOP
		BEGIN
			CASE n % 6
				WHEN 0 THEN PERFORM zk_try_lock(tag || n);
				WHEN 1 THEN PERFORM zk_lock(tag || n, '5s');
				WHEN 2 THEN PERFORM zk_try_lock_shared(tag || (n % 7));
				WHEN 3 THEN PERFORM count(*) FROM zk_lock_holders(tag || n);
				WHEN 4 THEN PERFORM zk_session_lock(tag || (n % 5), '5s');
				ELSE PERFORM zk_lock_shared(n::bigint, '5s');
			END CASE;
			ok := ok + 1;
		EXCEPTION WHEN OTHERS THEN
			IF NOT SQLSTATE = ANY (codes) THEN
				codes := codes || SQLSTATE::text;
			END IF;
		END;
		n := n + 1;
	END LOOP;
	PERFORM zk_unlock_all();
	RETURN n || ' ' || ok || ' ' || array_to_string(codes, ',');
END
$$;
});

# Six sessions: each has at most one request in flight, plus one it has
# just let go of and the worker has not freed yet, so 12 entries at most,
# as many as backends may take (16 less the worker's reserve of
# min(8, 16 / 4) = 4), and 2 each of the 4 zklock.max_locks_per_backend
# allows: failures must come from the outage, not from a full table (53200).
my $NSESS = 6;
my $SECS = 15;

# a session open from the start: a crash of any process (the postmaster
# then restarts every backend) ends it
my $sentinel = new_session($node, name => 'sentinel');

# $sql's output, or undef when it fails (the server may be restarting
# after a crash: the test goes on and reports it)
sub sql
{
	my ($q) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $q, on_error_die => 0);
	return $rc == 0 ? $out : undef;
}

sub worker_now
{
	return sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'zklock worker'") // 'none';
}

sub wait_server_up
{
	return wait_until(sub { defined sql('SELECT 1') }, 60);
}

# run the hammer in every session at once; returns the total number of
# requests, checks that every session finished and saw only failures
sub outage_round
{
	my ($what) = @_;
	my @sessions = map { new_session($node, name => "hammer$_") } 1 .. $NSESS;
	my $round_sentinel = new_session($node, name => 'round_sentinel');
	my $w0 = worker_now();
	my $i = 0;
	$_->send("SELECT hammer($SECS, 'o" . $i++ . "-')") foreach @sessions;
	my ($total, $succeeded, $lost) = (0, 0, 0);
	my %codes;
	foreach my $s (@sessions)
	{
		my $r = $s->wait($SECS + 60);
		if (!$r->{done} || $r->{sqlstate} ne '00000' || $r->{out} !~ /^(\d+) (\d+) ?(\S*)$/)
		{
			$lost++;
			diag "$what: session $s->{name} ended with $r->{sqlstate}: $r->{err}";
			next;
		}
		$total += $1;
		$succeeded += $2;
		$codes{$_}++ foreach grep { $_ ne '' } split /,/, $3;
	}
	note "$what: $total requests, $succeeded succeeded, SQLSTATEs: " . join(',', sort keys %codes);
	$_->quit foreach @sessions;
	ok(wait_server_up(), "$what: the server answers");
	is($lost, 0, "$what: all $NSESS sessions ran to the end (no backend lost)");
	ok($total > 500, "$what: $total failing requests, far more than max_locks (16)");
	is($succeeded, 0, "$what: no request succeeded without ZooKeeper");
	is_deeply([ sort keys %codes ], ['08006'], "$what: every request failed with 08006");
	is(worker_now(), $w0, "$what: the worker was not restarted (pid $w0)");
	is(sql('SELECT pg_postmaster_start_time()') // 'none', $start_time,
		"$what: the postmaster was not restarted");
	my $sr = $round_sentinel->{exited} ? { sqlstate => 'EXIT' } : $round_sentinel->query('SELECT 1', 30);
	is($sr->{sqlstate}, '00000', "$what: a session open during the round survived (no crash restart)");
	$round_sentinel->quit;
	ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
		"$what: entries_used back to 0")
	  or diag 'entries_used ' . zk_status_value($node, 'entries_used');
	return $total;
}

#
# outage 1: zklock.hosts names a closed port
#
my $n1 = outage_round("zklock.hosts = '$closed'");

#
# outage 2: zklock.hosts = '' (not configured), by reload
#
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.hosts = ''");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
$st = wait_for_state($node, 'not configured', 20);
is($st->{state}, 'not configured', "state 'not configured' after zklock.hosts = ''");
my $n2 = outage_round("zklock.hosts = ''");
note 'requests that failed during the two outages: ' . ($n1 + $n2);
ok($n1 + $n2 > 1000, 'more than a thousand requests failed during the outages (' . ($n1 + $n2) . ')');

#
# ZooKeeper reachable: locks work
#
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.hosts = '$zk->{hosts}'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
$st = wait_for_state($node, 'connected', 60);
is($st->{state}, 'connected', "connected once zklock.hosts names a running ZooKeeper");
is($st->{worker_pid} // 'none', $worker, 'still the same worker');
my $h = new_session($node, name => 'holder');
$h->query_safe('BEGIN');
my $r = $h->query("SELECT zk_lock('after')", 30);
is($r->{sqlstate}, '00000', 'zk_lock works after the outages') or diag $r->{err};
is(zk_count($zk, '/zklock/locks/after'), 1, 'its node is in ZooKeeper');
is(try_lock_elsewhere($node, 'after'), 'f', 'and it excludes another session');
# all 12 entries backends may take are usable (the worker keeps 4): 11
# more sessions hold a lock each
is($node->safe_psql('postgres', 'SHOW zklock.max_locks_per_backend'), '4',
	'zklock.max_locks_per_backend defaults to 16 / 4');
my @more = map { new_session($node, name => "full$_") } 1 .. 11;
my $full_ok = 0;
foreach my $i (0 .. $#more)
{
	$more[$i]->query_safe('BEGIN');
	my $rr = $more[$i]->query("SELECT zk_lock('full$i')", 30);
	$full_ok++ if $rr->{sqlstate} eq '00000';
}
is($full_ok, 11, 'all 12 entries backends may take can be used at once');
is(zk_status_value($node, 'entries_used'), '12', 'entries_used is 12');
$r = one_shot($node, "SELECT zk_try_lock('one-too-many')");
is($r->{sqlstate}, '53200', 'the 13th request fails with 53200') or diag $r->{err};
like($r->{err}, qr/the last 4 are kept for the zklock worker/, 'the last 4 are the worker\'s');
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.elections = 'e170'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok(wait_until(sub { (sql("SELECT zk_is_leader('e170')") // '') eq 't' }, 30, 0.2),
	'the worker still stands in an election, from its reserve, and leads it');
is(zk_status_value($node, 'entries_used'), '13', 'entries_used is 13');
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.elections = ''");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
$_->query_safe('COMMIT') foreach @more;
$_->quit foreach @more;
$h->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, '/zklock/locks', 0, 10)), 'nothing left in ZooKeeper');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0');
is(worker_now(), $worker, 'the worker was never restarted');
is(sql('SELECT pg_postmaster_start_time()') // 'none', $start_time,
	'the postmaster was never restarted');
my $sr = $sentinel->{exited} ? { sqlstate => 'EXIT' } : $sentinel->query('SELECT 1', 30);
is($sr->{sqlstate}, '00000', 'the session open since the start is still there');
$sentinel->quit;

# (read before the shutdown, at which the worker exits as it should)
my $log = slurp_file($node->logfile);
my @crashes = $log =~ /^.*(?:terminated by signal|terminating any other active server processes|all server processes terminated|"zklock worker" \(PID \d+\) exited).*$/mg;
is_deeply(\@crashes, [], 'the server log shows no crash and no worker exit') or diag join("\n", @crashes);
$h->quit;
$node->stop;

#
# defect 10: zklock.max_locks at its maximum
#
$node->start;
my $max = $node->safe_psql('postgres', "SELECT max_val FROM pg_settings WHERE name = 'zklock.max_locks'");
like($max, qr/^\d+$/, "zklock.max_locks accepts values up to $max");
$node->stop;

# shared memory the server needs with a given zklock.max_locks (MB)
sub shmem_mb
{
	my ($n) = @_;
	my ($out, $err) = run_command([ $node->installed_command('postgres'), '-D', $node->data_dir,
			'-c', "zklock.max_locks=$n", '-C', 'shared_memory_size' ]);
	chomp $out;
	die "postgres -C shared_memory_size failed: $err" unless $out =~ /^\d+$/;
	return $out;
}
my $mem_mb = 0;
if (open(my $mi, '<', '/proc/meminfo'))
{
	while (<$mi>) { $mem_mb = int($1 / 1024) if /^MemAvailable:\s+(\d+) kB/; }
	close $mi;
}
my $need = shmem_mb($max);
my $use = $max;
note "zklock.max_locks = $max needs $need MB of shared memory; $mem_mb MB available";
if ($mem_mb && $need > $mem_mb / 2)
{
	# too much for this machine: the largest value that fits in half of it
	my $base = shmem_mb(16);
	my $per = (shmem_mb(100000) - $base) / 99984;
	$use = int(($mem_mb / 2 - $base) / $per);
	diag "zklock.max_locks = $max would need $need MB of shared memory, more than half of the "
	  . "$mem_mb MB available here: testing $use instead (about "
	  . int($per * 1024 * 1024) . ' bytes per entry)';
}
# the 100 ms of the outage part would time out here: a zk_locks scan of
# this many entries takes seconds on a busy machine
$node->append_conf('postgresql.conf', "zklock.max_locks = $use\nzklock.connect_timeout = '10s'\n");
my $t0 = time();
$node->start;
note sprintf('started with zklock.max_locks = %d in %.1fs', $use, time() - $t0);
wait_for_state($node, 'connected', 60);
is(zk_status_value($node, 'max_locks'), $use, "zk_status().max_locks is $use");
$r = one_shot($node, 'SELECT count(*) FROM zk_locks', 120);
is($r->{sqlstate}, '00000', "zk_locks works with zklock.max_locks = $use") or diag $r->{err};
is($r->{out}, '0', 'zk_locks is empty');
$h = new_session($node, name => 'max_holder');
$h->query_safe('BEGIN');
$h->query_safe("SELECT zk_lock('m1'), zk_lock('m2'), zk_lock_shared('m3')");
$r = one_shot($node, "SELECT count(*), count(*) FILTER (WHERE state = 'held') FROM zk_locks", 120);
is($r->{sqlstate}, '00000', 'zk_locks works with a few locks held') or diag $r->{err};
is($r->{out}, '3|3', 'zk_locks shows the 3 locks held');
$r = one_shot($node, "SELECT count(*) FROM zk_lock_holders('m1')", 60);
is($r->{out}, '1', 'zk_lock_holders works too') or diag $r->{err};
$h->query_safe('COMMIT');
$h->quit;
ok(scalar(zk_wait_count($zk, '/zklock/locks', 0, 10)), 'nothing left in ZooKeeper');
$node->stop;

done_testing();
