
# 533_kept_total.pl - what all of zklock.root keeps in ZooKeeper (issue 35,
# item 2): zklock.max_kept_bytes and zklock.max_kept_nodes, counted by
# ZooKeeper's own quota stats on the root (src/core/kept.c), checked against what
# ZooKeeper really holds.
#
#   1. A kazoo client without credentials plants /zookeeper/quota/zklock,
#      open to everyone, before the cluster (zklock.auth_file) starts: a
#      WARNING with a hint, zk_status().acl_problems counts it and
#      zk_kept_totals() says 'untrusted': the bound is not enforced.
#   2. The planted node is deleted and the configuration reloaded: the
#      worker creates the quota nodes with its own ACL, zk_kept_totals()
#      says 'enforced', and its totals are those ZooKeeper's stats node
#      holds, which are the nodes and bytes really under /zklock.
#   3. zklock.max_kept_bytes = 2MB: a role with only "produce" fills many
#      queues, 15 items of 15 kB per COMMIT, until a COMMIT fails with
#      53400 (detail with the figures, hint naming the setting and saying
#      to consume); ZooKeeper's totals stay within 2 MB, nothing of the
#      refused transaction is there, and the stats match the real nodes.
#      Another role's lock + COMMIT still works.
#   4. Consuming two queues frees room: the producer's COMMIT works again.
#   5. A transaction larger than the bound by itself fails with 54000; over
#      the bound a lease write is refused (53400), a lock still works.
#   6. 16 concurrent COMMITs of 150 kB with room for two: one or two pass,
#      the others fail with 53400, and ZooKeeper keeps no more than the
#      bound (what the worker let through is reserved until it is counted).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $STATS = '/zookeeper/quota/zklock/zookeeper_stats';

# zkq.py reads zklock's private nodes with the cluster's identity
$ENV{ZKLOCK_ZK_AUTH} = 'zkl:secret';
my $anon = auth_kazoo($zk);
my $kz = auth_kazoo($zk, 'zkl:secret');

#
# 1. a quota node planted open before the cluster starts
#
is($anon->cmd('create /zookeeper/quota/zklock'), 'ok',
	'an unauthenticated client creates /zookeeper/quota/zklock first');
is($anon->cmd('acl /zookeeper/quota/zklock'), 'acl world:anyone:cdrwa', 'open to everyone');

my $auth = write_mode_file("$tmp/zk.auth", "zkl:secret\n", 0600);
my $node = zk_node('kept', $zk,
	connect_timeout => '5s',
	conf => "zklock.auth_file = '$auth'\nzklock.max_kept_bytes = '2MB'\nzklock.max_write_rate = 0\n");

sub q1 { return out_or_error($node, $_[0]); }

# zk_kept_totals() as a hash
sub totals
{
	my $out = q1(
		"SELECT concat_ws('|', state, coalesce(kept_nodes::text, ''), coalesce(kept_bytes::text, ''), "
		  . "coalesce(max_kept_nodes::text, ''), coalesce(max_kept_bytes::text, ''), writes_refused, "
		  . "coalesce(detail, '')) FROM zk_kept_totals()"
	);
	my @f = split /\|/, $out, -1;
	return {
		state => $f[0],
		nodes => $f[1],
		bytes => $f[2],
		max_nodes => $f[3],
		max_bytes => $f[4],
		refused => $f[5],
		detail => $f[6],
		raw => $out
	};
}

# ZooKeeper's own stats of the root: (count, bytes)
sub zk_stats
{
	my $d = $kz->cmd("read $STATS") // '';
	return $d =~ /^data count=(\d+),bytes=(\d+)/ ? ($1 + 0, $2 + 0) : (-1, -1);
}

# the nodes and bytes really under /zklock, the root included
sub real_sizes
{
	my $out = zkq($zk, 'sizes', '/zklock') // '';
	return $out =~ /^(\d+) (\d+)$/ ? ($1 + 0, $2 + 0) : (-2, -2);
}

# the stats equal what is really there (retried: the worker writes too)
sub stats_match
{
	my ($sn, $sb, $rn, $rb);
	my $ok = wait_until(
		sub {
			($sn, $sb) = zk_stats();
			($rn, $rb) = real_sizes();
			my ($sn2, $sb2) = zk_stats();
			return $sn == $rn && $sb == $rb && $sn2 == $sn && $sb2 == $sb;
		},
		15);
	diag "stats $sn nodes $sb bytes, really $rn nodes $rb bytes" unless $ok;
	return ($ok, $sn, $sb);
}

is(q1('SHOW zklock.max_kept_bytes'), '2MB', 'max_kept_bytes set to 2 MB');
is(one_shot($node, 'SHOW zklock.max_kept_nodes')->{out}, '500000', 'max_kept_nodes defaults to 500000');
ok( wait_until(
		sub {
			$node->log_contains(
				qr/WARNING:.*zookeeper quota node "\/zookeeper\/quota\/zklock" lets other clients change it \(ACL entry world:anyone:cdwa\); zklock\.max_kept_bytes and zklock\.max_kept_nodes are not enforced/
			);
		},
		20),
	'a WARNING names the planted quota node and says the bound is off');
ok($node->log_contains(qr/HINT:.*Delete \/zookeeper\/quota\/zklock/), 'with a hint');
ok(wait_until(sub { (zk_status($node)->{acl_problems} // 0) >= 1 }, 10),
	'zk_status().acl_problems counts it');
ok( wait_until(
		sub { (zk_status($node)->{acl_problem} // '') =~ m{^/zookeeper/quota/zklock} }, 10),
	'acl_problem names it')
  or diag explain zk_status($node);
my $t = totals();
is($t->{state}, 'untrusted', "zk_kept_totals() says 'untrusted'") or diag $t->{raw};
like($t->{detail}, qr{/zookeeper/quota/zklock is open to others}, 'and why');

#
# 2. the planted node removed, reload: the worker's own quota nodes
#
my ($rc, $out, $err) = zkq($zk, 'delete', '/zookeeper/quota/zklock');
is($rc, 0, 'the planted quota node deleted') or diag $err;
$node->reload;
ok(wait_until(sub { totals()->{state} eq 'enforced' }, 20),
	"after a reload zk_kept_totals() says 'enforced'")
  or diag totals()->{raw};
like($kz->cmd('acl /zookeeper/quota/zklock'), qr/^acl digest:zkl:[^,]+:cdrwa$/,
	"the quota directory has zklock's private ACL");
like($kz->cmd('acl /zookeeper/quota/zklock/zookeeper_stats'), qr/^acl digest:zkl:[^,]+:cdrwa$/,
	'and the stats node');
is($kz->cmd('read /zookeeper/quota/zklock/zookeeper_limits'), 'data count=-1,bytes=-1',
	'the limits node asks ZooKeeper to enforce nothing');
my ($ok, $sn, $sb) = stats_match();
ok($ok, "ZooKeeper's stats are the nodes and bytes really under /zklock ($sn nodes, $sb bytes)");
ok( wait_until(
		sub {
			my $x = totals();
			my ($n, $b) = zk_stats();
			return $x->{nodes} eq "$n" && $x->{bytes} eq "$b";
		},
		10),
	'zk_kept_totals() shows them')
  or diag totals()->{raw};
is(totals()->{max_bytes}, 2 * 1024 * 1024, 'against max_kept_bytes');

#
# 3. a producer fills the root over many queues
#
$node->safe_psql('postgres', q{
CREATE ROLE prod533 LOGIN;
CREATE ROLE other533 LOGIN;
SELECT zk_grant('produce', 'prod533');
SELECT zk_grant('lock', 'other533');
});
my $p = new_session($node, name => 'prod', user => 'prod533');
my $fill = "BEGIN; SELECT count(zk_enqueue('%s', repeat('x', 15000))) FROM generate_series(1, 15); COMMIT";
my ($committed, $r) = (0, undef);
for my $i (0 .. 19)
{
	$r = $p->query(sprintf($fill, "k$i"));
	last if $r->{sqlstate} ne '00000';
	$committed++;
}
is($r->{sqlstate}, '53400', "after $committed COMMITs of 225 kB the next is refused: 53400")
  or diag $r->{err};
ok($committed >= 7 && $committed <= 9, "the bound let 7 to 9 of them in ($committed)");
like($r->{err}, qr/zookeeper keeps as much zklock data as zklock\.max_kept_bytes and zklock\.max_kept_nodes allow/,
	'the message says why');
like($r->{err}, qr/DETAIL:  ZooKeeper counts under \/zklock \(zklock\.root\): \d+ nodes and \d+ bytes kept, up to 16 nodes and \d+ bytes more; zklock\.max_kept_nodes is 500000, zklock\.max_kept_bytes 2097152; nothing of this write was sent/,
	'the detail has the figures');
like($r->{err}, qr/HINT:.*Consume or drop queue items.*zklock\.max_kept_bytes/s,
	'the hint says to consume and names the setting');
is(zk_count($zk, "/zklock/queues/k$committed/entries"), 0, 'nothing of the refused transaction is there');
is(zk_count($zk, '/zklock/txns'), 0, 'and no transaction node');
($ok, $sn, $sb) = stats_match();
ok($ok, "ZooKeeper's stats are still the real nodes and bytes ($sn nodes, $sb bytes)");
ok($sb <= 2 * 1024 * 1024 && $sb > 2 * 1024 * 1024 - 2 * 230_000,
	"ZooKeeper keeps at most 2 MB under /zklock, and near it ($sb bytes)");
ok(totals()->{refused} >= 1, 'zk_kept_totals() counts the refusal');

my $o = new_session($node, name => 'other', user => 'other533');
$r = $o->query("BEGIN; SELECT zk_lock('o533', '5s'); COMMIT");
is($r->{sqlstate}, '00000', "another role's lock + COMMIT still works") or diag $r->{err};
$r = $p->query(sprintf($fill, 'k19'));
is($r->{sqlstate}, '53400', 'the producer stays refused') or diag $r->{err};

#
# 4. consuming frees room
#
for my $q ('k0', 'k1')
{
	is( q1("BEGIN; SELECT count(*) FROM zk_try_dequeue('$q', 100); COMMIT"),
		'15', "a consumer takes the 15 items of $q");
}
ok(wait_until(sub { zk_count($zk, '/zklock/queues/k0/entries') == 0 && zk_count($zk, '/zklock/queues/k1/entries') == 0 }, 15),
	'ZooKeeper no longer keeps them');
$r = $p->query(sprintf($fill, 'k19'));
is($r->{sqlstate}, '00000', "the producer's COMMIT works again") or diag $r->{err};
is(zk_count($zk, '/zklock/queues/k19/entries'), 15, 'its items are in ZooKeeper');
($ok, $sn, $sb) = stats_match();
ok($ok && $sb <= 2 * 1024 * 1024, "still within 2 MB ($sb bytes)");

#
# 5. larger than the bound by itself: 54000
#
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.max_kept_bytes = '100kB'");
$node->reload;
$p->quit;
ok(wait_until(sub { q1('SHOW zklock.max_kept_bytes') eq '100kB' }, 10), 'max_kept_bytes lowered to 100 kB');
$p = new_session($node, name => 'prod2', user => 'prod533');
$r = $p->query(sprintf($fill, 'k20'));
is($r->{sqlstate}, '54000', 'a transaction of 225 kB alone: 54000') or diag $r->{err};
like($r->{err}, qr/HINT:.*zklock\.max_kept_bytes/, 'hint names zklock.max_kept_bytes');
is(zk_count($zk, '/zklock/queues/k20/entries'), 0, 'nothing written');
# 1.8 MB kept, 100 kB allowed: a lease write is refused from the totals
# the worker read last; a lock still works
$r = one_shot($node, "SELECT zk_try_lease('l533', '1 min', 'holder')");
is($r->{sqlstate}, '53400', 'over the bound, a lease write is refused (53400)') or diag $r->{err};
ok(!zk_exists($zk, '/zklock/leases/l533/lease_holder'), 'and writes no holder node');
$r = one_shot($node, "BEGIN; SELECT zk_lock('x533', '5s'); COMMIT");
is($r->{sqlstate}, '00000', 'a lock + COMMIT still works') or diag $r->{err};

#
# 6. concurrent COMMITs of one cluster near the bound (994 part F): 16
#    sessions commit 150 kB each at once with room for two; what the
#    worker lets through is reserved until ZooKeeper counts it, so
#    together they do not pass the bound (before: 72 to 86 % over)
#
($ok, $sn, $sb) = stats_match();
ok($ok, "the stats match the nodes before the concurrent COMMITs ($sb bytes)");
my $bound_kb = int(($sb + 330 * 1024) / 1024);
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.max_kept_bytes = '${bound_kb}kB'");
$node->reload;
ok(wait_until(sub { q1('SHOW zklock.max_kept_bytes') =~ /^\d/ && q1('SELECT max_kept_bytes FROM zk_kept_totals()') == $bound_kb * 1024 }, 10),
	"max_kept_bytes set to $bound_kb kB: room for two COMMITs of 150 kB");
my @c = map { new_session($node, name => "c6_$_", user => 'prod533') } 1 .. 16;
$_->send("BEGIN; SELECT count(zk_enqueue('c6_" . $_->name . "', repeat('x', 15000))) FROM generate_series(1, 10); COMMIT") for @c;
my %st;
for (@c) { my $x = $_->wait(120); $st{$x->{sqlstate}}++; }
note '6: outcomes ' . join(', ', map { "$_: $st{$_}" } sort keys %st);
($ok, $sn, $sb) = stats_match();
ok($ok && $sb <= $bound_kb * 1024,
	"16 concurrent COMMITs did not pass the bound together ($sb bytes kept, bound " . $bound_kb * 1024 . ')');
ok(($st{'00000'} // 0) >= 1 && ($st{'00000'} // 0) <= 2, 'one or two of them passed (' . ($st{'00000'} // 0) . ')');
is(($st{'00000'} // 0) + ($st{'53400'} // 0), 16, 'the others failed with 53400');
$_->quit for @c;

$p->quit;
$o->quit;
$kz->quit;
$anon->quit;
$node->stop;
done_testing();
