
# 539_kept_garbled.pl - the root's kept totals (src/core/kept.c) when another
# client with zklock's credentials writes into ZooKeeper's quota stats node
# values that ZooKeeper accepts and keeps counting from (negative, or past
# what any ZooKeeper counts) but that are not totals: the worker stops
# calling the bound enforced, says so (a WARNING with a hint,
# zk_kept_totals() 'untrusted' with the detail), and enforces again once
# the stats node is made again.  Before this, zk_kept_totals() stayed
# 'enforced' on the totals last read, without a word, and every COMMIT
# passed the bound.  And when the limits node alone is deleted (ZooKeeper
# then stops counting the root, its stats freeze), the worker says so and
# makes the quota again, so ZooKeeper counts afresh; before, the frozen
# stats were enforced and a producer passed the bound silently.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $STATS = '/zookeeper/quota/zklock/zookeeper_stats';

$ENV{ZKLOCK_ZK_AUTH} = 'zkl:secret';
my $kz = auth_kazoo($zk, 'zkl:secret');
my $auth = write_mode_file("$tmp/zk.auth", "zkl:secret\n", 0600);
my $node = zk_node('garbled', $zk,
	connect_timeout => '5s',
	conf => "zklock.auth_file = '$auth'\nzklock.max_kept_bytes = '1MB'\nzklock.max_write_rate = 0\n");

sub totals
{
	my $r = one_shot($node,
		"SELECT concat_ws('|', state, coalesce(kept_bytes::text, ''), coalesce(detail, '')) FROM zk_kept_totals()");
	return $r->{sqlstate} eq '00000' ? $r->{out} : "error $r->{err}";
}

ok(wait_until(sub { totals() =~ /^enforced\|/ }, 20), 'enforced at start') or diag totals();

my $n = 0;
for my $bad ('count=-1000000,bytes=-1000000000', 'count=5,bytes=9223372036854775000')
{
	$n++;
	is($kz->cmd("set $STATS $bad"), 'ok', "$n: a client with the credentials writes \"$bad\" into the stats node");
	my $t;
	ok(wait_until(sub { ($t = totals()) =~ /^untrusted\|/ }, 15),
		"$n: zk_kept_totals() no longer says 'enforced'") or diag $t;
	like($t, qr/zookeeper_stats holds "count=/, "$n: the detail says what it holds");
	my $re = qr/WARNING:  zklock: zookeeper quota stats node "\/zookeeper\/quota\/zklock\/zookeeper_stats" holds "count=-?\d+,bytes=-?\d+", not totals zklock can read; zklock\.max_kept_bytes and zklock\.max_kept_nodes are not enforced/;
	ok(wait_log($node, $re, 15), "$n: a WARNING says the bound is not enforced");
	ok($node->log_contains(qr/HINT:  Delete \/zookeeper\/quota\/zklock\/zookeeper_stats \(zkCli\.sh delete\)/),
		"$n: with a hint");
	# a COMMIT meanwhile is not refused from totals nobody can read
	my $r = one_shot($node, "BEGIN; SELECT zk_enqueue('g538', 'x'); COMMIT");
	is($r->{sqlstate}, '00000', "$n: a COMMIT still works") or diag $r->{err};

	is($kz->cmd("delete $STATS"), 'ok', "$n: the stats node deleted");
	ok(wait_until(sub { ($t = totals()) =~ /^enforced\|\d+\|$/ }, 20),
		"$n: the worker makes it again and enforces the bound") or diag $t;
	like($kz->cmd("read $STATS"), qr/^data count=\d+,bytes=\d+$/, "$n: ZooKeeper counted the root afresh");
}

#
# 3. the limits node deleted: ZooKeeper stops counting (its stats freeze);
#    the worker says so, makes the quota again, and ZooKeeper counts the
#    root afresh, so a producer is refused at the bound again
#
my $LIMITS = '/zookeeper/quota/zklock/zookeeper_limits';
$node->safe_psql('postgres', q{CREATE ROLE prod538 LOGIN; SELECT zk_grant('produce', 'prod538');});
is($kz->cmd("delete $LIMITS"), 'ok', '3: a client with the credentials deletes zookeeper_limits alone');
ok( wait_log(
		$node,
		qr/WARNING:  zklock: zookeeper quota node "\/zookeeper\/quota\/zklock\/zookeeper_limits" is gone, so zookeeper stopped counting what \/zklock keeps; zklock makes the quota again/,
		15),
	'3: a WARNING says ZooKeeper stopped counting');
ok(wait_until(sub { ($kz->cmd("read $LIMITS") // '') eq 'data count=-1,bytes=-1' }, 15),
	'3: the worker made the limits node again');
my $p = new_session($node, name => 'prod', user => 'prod538');
my ($ok, $r) = (0, undef);
for my $i (1 .. 12)
{
	$r = $p->query("BEGIN; SELECT count(zk_enqueue('p538_$i', repeat('x', 15000))) FROM generate_series(1, 10); COMMIT");
	last if $r->{sqlstate} ne '00000';
	$ok++;
}
is($r->{sqlstate}, '53400', "3: a producer is refused at the bound again, after $ok COMMITs of 150 kB")
  or diag $r->{err};
my ($real, $stats);
ok( wait_until(
		sub {
			$real = zkq($zk, 'sizes', '/zklock') // '';
			$stats = $kz->cmd("read $STATS") // '';
			return $real =~ /^\d+ (\d+)$/ && $1 <= 1024 * 1024 && $stats =~ /,bytes=\Q$1\E\z/;
		},
		15),
	"3: ZooKeeper counts what is really kept ($real; $stats), within 1 MB");
$p->quit;

$kz->quit;
$node->stop;
done_testing();
