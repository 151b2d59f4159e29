
# 130_lock_kazoo.pl - interplay with kazoo's Lock, ReadLock and WriteLock recipes
# on the same path /zklock/locks/<name>: the node names and the queue rules
# are the same, so zklock and kazoo clients exclude (or share with) each
# other, and zk_lock_holders lists kazoo's contenders too.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('kazoo', $zk,
	session_timeout => '10s',
	connect_timeout => '3s');

my $LOCKS = '/zklock/locks';


my $s1 = new_session($node, name => 's1');
my $s2 = new_session($node, name => 's2');
my $kz = kazoo_client($zk);
my $kz2 = kazoo_client($zk);

#
# kazoo Lock against zk_lock
#
my $P = "$LOCKS/kx";
is($kz->cmd("lock $P 5"), 'locked', 'kazoo Lock acquired on /zklock/locks/kx');
is(try_lock_elsewhere($node, 'kx'), 'f', 'zk_try_lock is false while kazoo holds');
is(try_lock_shared_elsewhere($node, 'kx'), 'f', 'zk_try_lock_shared is false while kazoo holds');
ok(scalar(zk_wait_count($zk, $P, 1, 5)), 'failed try-locks left no node');
queue_request($zk, $s1, "SELECT zk_lock('kx')", $P, 2, 'zk_lock queues behind kazoo (2 nodes)');
sleep 1;
ok($s1->running, 'zk_lock waits for the kazoo holder');
is($kz->cmd("release $P"), 'released', 'kazoo releases');
my $r = $s1->wait(15);
is($r->{sqlstate}, '00000', 'zk_lock granted when kazoo releases') or diag $r->{err};
is($kz->cmd("lock $P 1", 30), 'timeout', 'kazoo Lock acquire times out while zk_lock holds');
is(zk_count($zk, $P), 1, "kazoo's abandoned attempt left no node");
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $P, 0, 5)), 'released');

#
# kazoo ReadLock and zk_lock_shared share
#
$P = "$LOCKS/kr";
is($kz->cmd("rlock $P 5"), 'locked', 'kazoo ReadLock acquired on /zklock/locks/kr');
$s1->query_safe('BEGIN');
$r = $s1->query("SELECT zk_lock_shared('kr', '5s')", 30);
is($r->{sqlstate}, '00000', 'zk_lock_shared granted while a kazoo reader holds') or diag $r->{err};
ok($r->{elapsed} < 3, sprintf('at once (%.2fs)', $r->{elapsed}));
is(zk_lock_modes($zk, $P), 'shared,shared', "kazoo's __rlock__ node and zklock's __rlock__ node");
is(try_lock_elsewhere($node, 'kr'), 'f', 'zk_try_lock (exclusive) is false with both readers');
is($kz2->cmd("rlock $P 5"), 'locked', 'a second kazoo reader joins them');
is($kz2->cmd("rrelease $P"), 'released', 'and leaves');
is($kz->cmd("rrelease $P"), 'released', 'the first kazoo reader leaves');
ok(scalar(zk_wait_count($zk, $P, 1, 5)), 'only the zklock reader is left');

#
# kazoo WriteLock waits for zk_lock_shared holders
#
$s2->query_safe('BEGIN');
$s2->query_safe("SELECT zk_lock_shared('kr')");
is(zk_lock_modes($zk, $P), 'shared,shared', 'two zklock readers hold');
$kz->send("wlock $P 60");
ok(scalar(zk_wait_count($zk, $P, 3, 10)), 'kazoo WriteLock queues (3 nodes)');
is(zk_lock_modes($zk, $P), 'shared,shared,exclusive', "kazoo's writer node is __lock__");
is($kz->read_line(1.5), undef, 'kazoo writer waits');
$s1->query_safe('COMMIT');
is($kz->read_line(1.5), undef, 'kazoo writer still waits for the second zklock reader');
$s2->query_safe('COMMIT');
is($kz->read_line(15), 'locked', 'kazoo WriteLock acquired when the zklock readers released');
is(zk_count($zk, $P), 1, "only kazoo's writer node left");

#
# zk_lock and zk_lock_shared wait for a kazoo WriteLock
#
is(try_lock_shared_elsewhere($node, 'kr'), 'f', 'zk_try_lock_shared is false while the kazoo writer holds');
queue_request($zk, $s1, "SELECT zk_lock('kr')", $P, 2, 'zk_lock queues behind the kazoo writer');
queue_request($zk, $s2, "SELECT zk_lock_shared('kr')", $P, 3, 'zk_lock_shared queues behind zk_lock');
is(zk_lock_modes($zk, $P), 'exclusive,exclusive,shared', 'queue: kazoo writer, zklock writer, zklock reader');
sleep 1;
ok($s1->running && $s2->running, 'both wait for the kazoo writer');
is($kz->cmd("wrelease $P"), 'released', 'kazoo writer releases');
$r = $s1->wait(15);
is($r->{sqlstate}, '00000', 'zk_lock granted after the kazoo writer released') or diag $r->{err};
sleep 1;
ok($s2->running, 'zk_lock_shared still waits for zk_lock');

# a kazoo ReadLock waits for zk_lock
is($kz->cmd("rlock $P 1", 30), 'timeout', 'kazoo ReadLock times out while zk_lock holds');
$s1->query_safe('COMMIT');
$r = $s2->wait(15);
is($r->{sqlstate}, '00000', 'zk_lock_shared granted after zk_lock committed') or diag $r->{err};
is($kz->cmd("rlock $P 5", 30), 'locked', 'kazoo ReadLock shares with zk_lock_shared');
$kz2->send("wlock $P 1");
is($kz2->read_line(30), 'timeout', 'kazoo WriteLock times out while zklock and kazoo readers hold');
is($kz->cmd("rrelease $P"), 'released', 'kazoo reader releases');
$s2->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $P, 0, 5)), 'no nodes left under kr');

#
# zk_lock_holders lists kazoo's contenders
#
$P = "$LOCKS/kh";
is($kz->cmd("lock $P 5"), 'locked', 'kazoo Lock holds /zklock/locks/kh');
my $kline = $kz->cmd("node $P");
my ($knode) = ($kline // '') =~ /^node (\S+)$/;
ok(defined $knode, "kazoo's node: " . ($knode // 'unknown'));
queue_request($zk, $s1, "SELECT zk_lock('kh')", $P, 2, 'zk_lock waits behind kazoo');
my @zn = zk_lock_nodes($zk, $P);
my $h = $s2->query_safe(
	"SELECT node, mode, state, position, token, "
	  . "cluster IS NULL, host IS NULL, port IS NULL, database IS NULL, pid IS NULL, "
	  . "usename IS NULL, application_name IS NULL, since IS NULL, data "
	  . "FROM zk_lock_holders('kh') ORDER BY position");
my @rows = map { [ split /\|/, $_, -1 ] } split /\n/, $h;
is(scalar(@rows), 2, 'zk_lock_holders lists two contenders') or diag $h;
my $kcz = zk_czxid($zk, "$P/" . ($knode // 'x'));
is_deeply($rows[0] // [],
	[ $knode // 'x', 'exclusive', 'held', '0', $kcz // -1, ('t') x 8, 'kazoo-tap' ],
	"kazoo's node: held, position 0, token = czxid, NULL identity, data 'kazoo-tap'")
  or diag $h;
is_deeply([ @{ $rows[1] // [] }[ 0 .. 3, 9 ] ],
	[ $zn[1]{name} // 'x', 'exclusive', 'waiting', '1', 'f' ],
	"zklock's waiting node: position 1, with a pid")
  or diag $h;
is($s2->query_safe("SELECT pid FROM zk_lock_holders('kh') WHERE position = 1"), $s1->{pid},
	'and the pid of the waiting backend');
is($kz->cmd("release $P"), 'released', 'kazoo releases');
$r = $s1->wait(15);
is($r->{sqlstate}, '00000', 'zk_lock granted') or diag $r->{err};

# a kazoo reader behind the zklock holder is listed as a waiting shared node
$kz->send("rlock $P 60");
ok(scalar(zk_wait_count($zk, $P, 2, 10)), 'kazoo reader queues');
$h = $s2->query_safe("SELECT mode, state, position, pid = $s1->{pid}, pid IS NULL, CASE WHEN pid IS NULL THEN data END FROM zk_lock_holders('kh') ORDER BY position");
is($h, "exclusive|held|0|t|f|\nshared|waiting|1||t|kazoo-tap", 'holder from zklock, waiting kazoo reader')
  or diag $h;
$s1->query_safe('COMMIT');
is($kz->read_line(15), 'locked', 'kazoo reader granted after COMMIT');
is($s2->query_safe("SELECT mode, state, position, data FROM zk_lock_holders('kh')"),
	'shared|held|0|kazoo-tap', 'zk_lock_holders shows the kazoo reader holding');
is($kz->cmd("rrelease $P"), 'released', 'kazoo reader releases');

#
# an upgrade never jumps a kazoo Lock: kazoo's plain Lock waits only for
# older exclusive nodes, so queued behind a zklock reader it HOLDS the lock
# (the model-based tester granted the upgrade beside it: two exclusive
# holders); a zklock writer queued there waits for the reader, and the
# upgrade does jump that one
#
$P = "$LOCKS/ku";
$s1->query_safe("BEGIN");
is($s1->query_safe("SELECT zk_try_lock_shared('ku')"), 't', 'zklock reader holds ku');
is($kz->cmd("lock $P 5"), 'locked', "kazoo's Lock behind it holds too (it ignores readers)");
is($s1->query_safe("SELECT zk_try_lock('ku')"), 'f', 'the upgrade try: false while kazoo holds');
$r = $s1->query("SELECT zk_lock('ku', '300ms')", 15);
is($r->{sqlstate}, '55P03', 'the upgrade with a timeout: 55P03') or diag $r->{err};
$s1->query_safe("ROLLBACK");
$s1->query_safe("BEGIN");
is($s1->query_safe("SELECT zk_try_lock_shared('ku')"), 'f', 'a reader now waits for kazoo');
$s1->query_safe("ROLLBACK");
is($kz->cmd("release $P"), 'released', 'kazoo releases');
$s1->query_safe("BEGIN");
is($s1->query_safe("SELECT zk_try_lock_shared('ku')"), 't', 'the reader again');
$s2->send("BEGIN; SELECT zk_lock('ku', '30s') > 0");
ok(scalar(zk_wait_count($zk, $P, 2, 10)), 'a zklock writer queues behind it');
is($s1->query_safe("SELECT zk_lock('ku', '5s') > 0"), 't', 'the upgrade jumps the zklock writer');
ok($s2->running, 'which still waits');
$s1->query_safe("COMMIT");
$r = $s2->wait(15);
is($r->{out}, 't', 'and gets it after COMMIT') or diag $r->{err};
$s2->query_safe("COMMIT");

$kz->quit;
$kz2->quit;
# kazoo made its lock paths persistent nodes: remove them
zkq($zk, 'delete', "$LOCKS/$_") foreach qw(kx kr kh ku);
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper at the end');

$s1->quit;
$s2->quit;
$node->stop;
done_testing();
