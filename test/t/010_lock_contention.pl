
# 010_lock_contention.pl - contention for one name: waiting, arrival order,
# fencing tokens, try-lock, re-entrancy, savepoints, rollback.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('contention', $zk,
	session_timeout => '4s',
	connect_timeout => '3s');

my $LOCKS = '/zklock/locks';

$node->safe_psql('postgres',
	'CREATE TABLE grants (seq serial, who text, token bigint, at timestamptz)'
);

my $s1 = new_session($node, name => 'h1');
my $s2 = new_session($node, name => 'w2');
my $s3 = new_session($node, name => 'w3');

#
# One holder, two waiters in arrival order
#
$s1->query_safe('BEGIN');
my $tok1 = $s1->query_safe(
	"INSERT INTO grants (who, token, at) SELECT 'h1', zk_lock('job'), clock_timestamp() RETURNING token"
);
like($tok1, qr/^\d+$/, 'zk_lock returns a bigint token');
is(zk_count($zk, "$LOCKS/job"), 1, 'holder has exactly one node under /zklock/locks/job');

my @kids = zk_children($zk, "$LOCKS/job");
like($kids[0] // '', qr/^[0-9a-f]{32}__lock__\d{10}$/,
	'contender node is named <32-hex-guid>__lock__<10-digit seq>')
  or diag zk_tree($zk, $LOCKS);

is(try_lock_elsewhere($node, 'job'), 'f', 'zk_try_lock is false while held elsewhere');
ok(scalar(zk_wait_count($zk, "$LOCKS/job", 1, 3)), 'failed zk_try_lock leaves no node behind');

$s2->query_safe('BEGIN');
$s2->send(
	"INSERT INTO grants (who, token, at) SELECT 'w2', zk_lock('job'), clock_timestamp() RETURNING token"
);
ok(scalar(zk_wait_count($zk, "$LOCKS/job", 2, 10)), 'second contender has its node (2 nodes)');

$s3->query_safe('BEGIN');
$s3->send(
	"INSERT INTO grants (who, token, at) SELECT 'w3', zk_lock('job'), clock_timestamp() RETURNING token"
);
ok(scalar(zk_wait_count($zk, "$LOCKS/job", 3, 10)), 'third contender has its node (3 nodes)');

# both are still blocked after a second
sleep 1;
ok($s2->running, 'second session still waits after 1 s');
ok($s3->running, 'third session still waits after 1 s');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid IN ($s2->{pid}, $s3->{pid}) AND state = 'active'"),
	'2', 'pg_stat_activity shows both waiters active');
is(zk_count($zk, "$LOCKS/job"), 3, 'still 3 nodes while they wait');

# the holder commits: the earliest waiter (w2) gets it, w3 keeps waiting
$s1->query_safe('COMMIT');
my $r2 = $s2->wait(15);
ok($r2->{done}, 'first waiter granted after holder commits');
is($r2->{sqlstate}, '00000', 'first waiter got no error') or diag $r2->{err};
my $tok2 = $r2->{out};
ok($s3->running, 'third session still waits while the second holds');
ok(scalar(zk_wait_count($zk, "$LOCKS/job", 2, 5)), 'holder node removed at commit (2 nodes left)');
is(try_lock_elsewhere($node, 'job'), 'f', 'zk_try_lock false while the second session holds');

$s2->query_safe('COMMIT');
my $r3 = $s3->wait(15);
ok($r3->{done}, 'second waiter granted after first waiter commits');
is($r3->{sqlstate}, '00000', 'second waiter got no error') or diag $r3->{err};
my $tok3 = $r3->{out};
$s3->query_safe('COMMIT');

my $order = $node->safe_psql('postgres',
	'SELECT string_agg(who, \',\' ORDER BY at) FROM grants');
is($order, 'h1,w2,w3', 'locks granted in arrival order');
ok( (grep { defined && /^\d+$/ } ($tok1, $tok2, $tok3)) == 3
	  && $tok1 < $tok2
	  && $tok2 < $tok3,
	"fencing tokens strictly increase ($tok1, $tok2, $tok3)");

ok(scalar(zk_wait_count($zk, "$LOCKS/job", 0, 5)), 'no contender nodes left after all commits');
is(try_lock_elsewhere($node, 'job'), 't', 'zk_try_lock true once nobody holds it');

#
# A token is the node's czxid: compare with ZooKeeper's own view
#
$s1->query_safe('BEGIN');
my $tok4 = $s1->query_safe("SELECT zk_lock('job')");
my $tree = zk_tree($zk, "$LOCKS/job");
my ($czxid) = $tree =~ m{^\Q$LOCKS/job/\E\S+ \S+ (0x[0-9a-f]+)$}m;
ok(defined $czxid && hex($czxid) == $tok4,
	"token $tok4 is the czxid of the lock node") or diag $tree;
ok($tok4 > $tok3, 'token of a later grant is larger');

#
# Re-entrancy: same token, one node
#
my $tok4b = $s1->query_safe("SELECT zk_lock('job')");
is($tok4b, $tok4, 're-taking a held lock returns the same token');
is($s1->query_safe("SELECT zk_try_lock('job')"), 't',
	'zk_try_lock on a lock held by the same transaction is true');
is(zk_count($zk, "$LOCKS/job"), 1, 're-taking creates no second node');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/job", 0, 5)), 'single node removed at commit');
is(try_lock_elsewhere($node, 'job'), 't', 'released after commit of the re-entrant holder');

#
# zk_try_lock held by the transaction
#
$s1->query_safe('BEGIN');
is($s1->query_safe("SELECT zk_try_lock('tl')"), 't', 'zk_try_lock on a free name is true');
is(zk_count($zk, "$LOCKS/tl"), 1, 'zk_try_lock that succeeded keeps its node');
is(try_lock_elsewhere($node, 'tl'), 'f', 'lock from zk_try_lock is held until end of transaction');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/tl", 0, 5)), 'try-lock node removed at commit');

#
# Savepoints
#
$s1->query_safe('BEGIN');
my $ta = $s1->query_safe("SELECT zk_lock('outer')");
$s1->query_safe('SAVEPOINT sp1');
my $tb = $s1->query_safe("SELECT zk_lock('inner')");
my $ta2 = $s1->query_safe("SELECT zk_lock('outer')");
is($ta2, $ta, 're-taking the outer lock inside the savepoint returns its token');
is(try_lock_elsewhere($node, 'inner'), 'f', 'lock taken in savepoint is held');
is(zk_count($zk, "$LOCKS/inner"), 1, 'one node for the savepoint lock');
$s1->query_safe('ROLLBACK TO SAVEPOINT sp1');
ok(scalar(zk_wait_count($zk, "$LOCKS/inner", 0, 5)),
	'ROLLBACK TO SAVEPOINT removes the node of the lock taken inside it');
ok( wait_until(sub { try_lock_elsewhere($node, 'inner') eq 't' }, 5),
	'lock taken inside the savepoint is free while the transaction is still open');
is(try_lock_elsewhere($node, 'outer'), 'f',
	'lock taken before the savepoint survives ROLLBACK TO (even if re-taken inside)');
is(zk_count($zk, "$LOCKS/outer"), 1, 'outer lock still has its node');
is($s1->query_safe("SELECT zk_lock('outer')"), $ta, 'outer lock still held by the same grant');

# a released savepoint keeps its locks until the end of the transaction
$s1->query_safe('SAVEPOINT sp2');
my $tc = $s1->query_safe("SELECT zk_lock('inner2')");
$s1->query_safe('RELEASE SAVEPOINT sp2');
is(try_lock_elsewhere($node, 'inner2'), 'f', 'lock from a released savepoint is still held');

# re-take in a new savepoint after release of the inner one: a new grant
$s1->query_safe('SAVEPOINT sp3');
my $tb2 = $s1->query_safe("SELECT zk_lock('inner')");
ok($tb2 > $tb, 'lock re-taken after ROLLBACK TO is a new grant with a larger token');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'commit releases everything (no nodes under /zklock/locks)');
is(try_lock_elsewhere($node, 'outer'), 't', 'outer lock free after commit');
is(try_lock_elsewhere($node, 'inner2'), 't', 'inner2 lock free after commit');

# error inside a savepoint: the savepoint's lock goes, the outer one stays
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('outer')");
$s1->query_safe('SAVEPOINT sp');
$s1->query_safe("SELECT zk_lock('inner')");
my $re = $s1->query('SELECT 1/0');
is($re->{sqlstate}, '22012', 'error inside the savepoint');
$s1->query_safe('ROLLBACK TO SAVEPOINT sp');
ok( wait_until(sub { try_lock_elsewhere($node, 'inner') eq 't' }, 5),
	'lock of a failed subtransaction released by ROLLBACK TO');
is(try_lock_elsewhere($node, 'outer'), 'f', 'outer lock survives the failed subtransaction');
$s1->query_safe('COMMIT');

#
# ROLLBACK releases, and so does an aborted transaction
#
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('rb')");
is(try_lock_elsewhere($node, 'rb'), 'f', 'held before ROLLBACK');
$s1->query_safe('ROLLBACK');
ok(scalar(zk_wait_count($zk, "$LOCKS/rb", 0, 5)), 'ROLLBACK removes the node');
is(try_lock_elsewhere($node, 'rb'), 't', 'ROLLBACK releases the lock');

$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('rb')");
$s1->query('SELECT 1/0');
# like PostgreSQL's own locks, it may already be released at the error
note 'after the error, before ROLLBACK: zk_try_lock elsewhere says '
  . try_lock_elsewhere($node, 'rb');
$s1->query('COMMIT');    # rolls back
ok(scalar(zk_wait_count($zk, "$LOCKS/rb", 0, 5)), 'end of aborted transaction removes the node');
is(try_lock_elsewhere($node, 'rb'), 't', 'lock of the aborted transaction is free');

# autocommit: released at the end of the statement's transaction
$s1->query_safe("SELECT zk_lock('auto')");
ok(scalar(zk_wait_count($zk, "$LOCKS/auto", 0, 5)), 'lock taken outside a transaction block is released at once');

#
# A waiter is granted when the holder rolls back to a savepoint
#
$s1->query_safe('BEGIN');
$s1->query_safe('SAVEPOINT sp');
my $tsp = $s1->query_safe("SELECT zk_lock('spw')");
$s2->send("SELECT zk_lock('spw')");
ok(scalar(zk_wait_count($zk, "$LOCKS/spw", 2, 10)), 'waiter queued behind a savepoint lock');
$s1->query_safe('ROLLBACK TO SAVEPOINT sp');
my $rsp = $s2->wait(15);
is($rsp->{sqlstate}, '00000', 'waiter granted when the holder rolls back to its savepoint')
  or diag $rsp->{err};
ok($rsp->{out} =~ /^\d+$/ && $rsp->{out} > $tsp, 'with a larger token');
$s1->query_safe('COMMIT');

#
# Lock names are cluster-wide: the same name in another database conflicts
#
$node->safe_psql('postgres', 'CREATE DATABASE otherdb');
$node->safe_psql('otherdb', 'CREATE EXTENSION zklock');
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('xdb')");
is($node->safe_psql('otherdb', "SELECT zk_try_lock('xdb')"), 'f',
	'a lock taken in one database excludes the same name in another');
$s1->query_safe('COMMIT');
is($node->safe_psql('otherdb', "SELECT zk_try_lock('xdb')"), 't',
	'and is free there after commit');

#
# Two PostgreSQL clusters sharing one ZooKeeper exclude each other
#
my $node2 = zk_node('contention2', $zk,
	session_timeout => '4s',
	connect_timeout => '3s');
isnt(zk_status_value($node2, 'session_id'), zk_status_value($node, 'session_id'),
	'second cluster has its own ZooKeeper session');
my $o1 = new_session($node2, name => 'other_cluster');
$s1->query_safe('BEGIN');
my $tx1 = $s1->query_safe("SELECT zk_lock('xcluster')");
is(try_lock_elsewhere($node2, 'xcluster'), 'f', 'lock held by cluster 1 is busy for cluster 2');
queue_request($zk, $o1, "SELECT zk_lock('xcluster')", "$LOCKS/xcluster", 2, 'cluster 2 waits in the same queue');
sleep 1;
ok($o1->running, 'cluster 2 still waiting after 1 s');
$s1->query_safe('COMMIT');
my $rx = $o1->wait(15);
is($rx->{sqlstate}, '00000', 'cluster 2 granted when cluster 1 commits') or diag $rx->{err};
ok($rx->{out} =~ /^\d+$/ && $rx->{out} > $tx1, 'token from cluster 2 is larger');
is(try_lock_elsewhere($node, 'xcluster'), 'f', 'now busy for cluster 1');
$o1->query_safe('COMMIT');
is(try_lock_elsewhere($node, 'xcluster'), 't', 'free for cluster 1 after cluster 2 commits');
$o1->quit;
$node2->stop;

#
# Other ZooKeeper clients: kazoo's Lock recipe on <root>/locks/<name> uses
# the same node names and order, so it and zk_lock exclude each other
#
my $kz = kazoo_client($zk);
is($kz->cmd("lock $LOCKS/kz 5"), 'locked', 'kazoo takes the lock on /zklock/locks/kz');
is(try_lock_elsewhere($node, 'kz'), 'f', 'zk_try_lock sees the kazoo holder');
queue_request($zk, $s2, "SELECT zk_lock('kz')", "$LOCKS/kz", 2, 'zk_lock queues behind the kazoo holder');
sleep 1;
ok($s2->running, 'zk_lock still waits for the kazoo holder after 1 s');
is($kz->cmd("release $LOCKS/kz"), 'released', 'kazoo releases');
my $rk = $s2->wait(15);
is($rk->{sqlstate}, '00000', 'zk_lock granted when kazoo releases') or diag $rk->{err};
is($kz->cmd("lock $LOCKS/kz 1", 30), 'timeout', 'kazoo cannot take the lock held by zk_lock');
is(zk_count($zk, "$LOCKS/kz"), 1, "kazoo's abandoned attempt left no node");
$kz->send("lock $LOCKS/kz 30");
ok(scalar(zk_wait_count($zk, "$LOCKS/kz", 2, 10)), 'kazoo queues behind zk_lock');
$s2->query_safe('COMMIT');
is($kz->read_line(15), 'locked', 'kazoo granted when the zk_lock transaction commits');
is($kz->cmd("release $LOCKS/kz"), 'released', 'kazoo releases again');
$kz->quit;
ok(scalar(zk_wait_count($zk, "$LOCKS/kz", 0, 5)), 'no nodes left by kazoo or zk_lock');
# kazoo made /zklock/locks/kz a persistent node: remove it
zkq($zk, 'delete', "$LOCKS/kz");

#
# Names: several names at once, odd names, bad input
#
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'empty containers cleaned up');
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('a.b-c_D9')");
my ($ex_rc) = zkq($zk, 'exists', "$LOCKS/a.b-c_D9");
is($ex_rc, 0, 'plain name maps to itself');
$s1->query_safe("SELECT zk_lock('with/slash and space')");
is(zk_count($zk, $LOCKS), 4, 'two names, two containers with one node each');
is(try_lock_elsewhere($node, 'with/slash and space'), 'f', 'name with odd characters is locked too');
is(try_lock_elsewhere($node, 'with/slash and spacf'), 't', 'a different name is not');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'all nodes gone after commit');

my $bad = one_shot($node, "SELECT zk_lock('')");
is($bad->{sqlstate}, '22023', 'empty name rejected with 22023') or diag $bad->{err};
$bad = one_shot($node, "SELECT zk_lock('x', '-1s')");
is($bad->{sqlstate}, '22023', 'negative timeout rejected with 22023') or diag $bad->{err};
$bad = one_shot($node, "SELECT zk_lock(repeat('x', 300))");
is($bad->{sqlstate}, '22023', 'over-long name rejected with 22023') or diag $bad->{err};
is(one_shot($node, 'SELECT zk_lock(NULL) IS NULL')->{out}, 't', 'NULL name returns NULL');

ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'zk_status().entries_used is 0 when nothing is held');
is(zk_status_value($node, 'max_locks'), '1024', 'zk_status().max_locks shows the default 1024');
my $grants = zk_status_value($node, 'grants');
ok($grants =~ /^\d+$/ && $grants >= 10, "zk_status().grants counted ($grants)");

$s1->quit;
$s2->quit;
$s3->quit;

ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper at the end');

$node->stop;
done_testing();
