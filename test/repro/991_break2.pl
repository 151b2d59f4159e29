
# 991_break2.pl - hostile review of issue 35 (breaker), part 2.
#
# D. lock churn: zk_try_session_lock/zk_unlock of new names is never charged
#    to zklock.max_write_rate; each new name leaves a container node.
# E. one tenant's many queues / leases / semaphores (in its own namespace)
#    push the shared listing over zklock.max_children: another tenant's
#    zk_queues / zk_leases / zk_semaphores fail.
# F. max_kept_items raced by concurrent sessions.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('brk2', $zk, namespace => undef, conf => "max_connections = 40\n");
my $su = $A->safe_psql('postgres', 'SELECT current_user');

sub run
{
	my ($db, $sql, $user) = @_;
	my ($rc, $out, $err) = $A->psql($db, $sql,
		extra_params => [ '-U', $user // $su, '-v', 'VERBOSITY=verbose' ],
		on_error_stop => 1, timeout => 120);
	my $st = $err =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
	return { sqlstate => $st, out => $out, err => $err };
}

$A->safe_psql('postgres', q{
CREATE ROLE ten LOGIN; CREATE ROLE other LOGIN;
SELECT zk_grant(g, 'ten') FROM unnest(ARRAY['lock','produce','consume','lease','semaphore','monitor']) g;
ALTER ROLE ten SET zklock.max_write_rate = '16kB';
ALTER ROLE ten SET zklock.max_write_burst = '64kB';
CREATE DATABASE otherdb;
});
$A->safe_psql('otherdb', q{CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk;
GRANT USAGE ON SCHEMA zk TO other; SELECT zk.zk_grant('monitor', 'other'); SELECT zk.zk_grant('lock', 'other');});

#
# D. lock churn, uncharged
#
my $t0 = time;
my $r = run('postgres', q{
DO $$ BEGIN FOR i IN 1..3000 LOOP
  PERFORM zk_try_session_lock('c' || i); PERFORM zk_unlock('c' || i);
END LOOP; END $$;}, 'ten');
my $took = time - $t0;
is($r->{sqlstate}, '00000', 'D: ten takes and releases 3000 session locks') or diag $r->{err};
my $cont = zk_count($zk, '/zklock/locks');
my $w = $A->safe_psql('postgres', "SELECT coalesce((SELECT bytes_written FROM zk_quotas WHERE role = 'ten'), 0)");
note sprintf("D: %.2f s (%.0f lock+unlock/s), containers left under /zklock/locks: %d, charged %s bytes",
	$took, 3000 / $took, $cont, $w);
ok($w > 0, "D: lock writes are charged to the role's write rate (charged $w, rate 16 kB/s)");

#
# E. shared listings, another tenant's introspection
#
$r = run('postgres', q{
DO $$ BEGIN FOR i IN 1..40 LOOP
  PERFORM zk_try_lease('l' || i, '1 second');
  PERFORM zk_try_session_semaphore('s' || i, 1); PERFORM zk_semaphore_release('s' || i);
END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..40 LOOP PERFORM zk_enqueue('q' || i, 'x'); COMMIT; END LOOP; END $$;}, 'ten');
is($r->{sqlstate}, '00000', 'E: ten creates 40 leases, semaphores and queues in its namespace') or diag $r->{err};
$A->safe_psql('postgres', "ALTER SYSTEM SET zklock.max_children = 30; SELECT pg_reload_conf()");
sleep 1;
for my $v ('zk_queues', 'zk_leases', 'zk_semaphores', 'zk_locks')
{
	$r = run('otherdb', "SELECT count(*) FROM zk.$v", 'other');
	note "E: other's SELECT count(*) FROM zk.$v: $r->{sqlstate} $r->{out} " . ($r->{err} =~ /ERROR:\s*(.*)/ ? $1 : '');
	is($r->{sqlstate}, '00000', "E: another tenant's $v still answers (ten's names are not its own)");
}
$A->safe_psql('postgres', "ALTER SYSTEM RESET zklock.max_children; SELECT pg_reload_conf()");

#
# F. max_kept_items raced
#
$A->safe_psql('postgres', q{ALTER ROLE ten SET zklock.max_kept_items = 3;
ALTER ROLE ten RESET zklock.max_write_rate; ALTER ROLE ten RESET zklock.max_write_burst;});
my @pids;
for my $k (1 .. 8)
{
	my $pid = fork();
	if ($pid == 0)
	{
		$A->psql('postgres',
			"SELECT pg_sleep(1.5 - extract(epoch from now())::numeric % 1 + 0); BEGIN; SELECT zk_enqueue('race', 'r$k-' || i) FROM generate_series(1, 3) i; COMMIT",
			extra_params => [ '-U', 'ten' ]);
		POSIX::_exit(0);
	}
	push @pids, $pid;
}
waitpid($_, 0) for @pids;
my $n = zk_count($zk, '/zklock/queues/postgres:race/entries');
note "F: items in race with max_kept_items 3 and 8 concurrent transactions of 3: $n";
ok($n <= 3, "F: max_kept_items 3 holds under 8 concurrent COMMITs (ZooKeeper holds $n)");

$A->stop;
zk_stop($zk);
done_testing();
