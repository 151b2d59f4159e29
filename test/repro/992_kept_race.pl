
# 992_kept_race.pl - hostile review (breaker): zklock.max_kept_items raced by
# 8 concurrent transactions of 3 items each into one queue (bound 3).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use POSIX ();
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('brk3', $zk, namespace => undef, conf => "max_connections = 40\n");
$A->safe_psql('postgres', q{CREATE ROLE ten LOGIN; SELECT zk_grant('produce', 'ten');});

#
# F. max_kept_items raced
#
$A->safe_psql('postgres', q{ALTER ROLE ten SET zklock.max_kept_items = 3;
});
my @pids;
for my $k (1 .. 8)
{
	my $pid = fork();
	if ($pid == 0)
	{
		$A->psql('postgres',
			"SELECT pg_sleep(2 - extract(epoch from now())::numeric % 1); BEGIN; SELECT zk_enqueue('race', 'r$k-' || i) FROM generate_series(1, 3) i; COMMIT",
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
