
# 150_introspection.pl - the zk_locks view (this cluster's entries) and
# zk_lock_holders(name) (every contender, read from ZooKeeper, so also
# those of other PostgreSQL clusters).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my ($node1, $node2) = map { zk_node($_, $zk, session_timeout => '10s', connect_timeout => '3s') }
  qw(intro1 intro2);

my $LOCKS = '/zklock/locks';
my $IV = "$LOCKS/iv";

my $sysid1 = $node1->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $sysid2 = $node2->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
isnt($sysid1, $sysid2, "the two clusters have different system identifiers ($sysid1, $sysid2)");
my $user = $node1->safe_psql('postgres', 'SELECT current_user');

sub rows
{
	my ($out) = @_;
	return [ map { [ split /\|/, $_, -1 ] } grep { $_ ne '' } split /\n/, $out ];
}

my $h = new_session($node1, name => 'holder');
my $w = new_session($node1, name => 'waiter');
my $w2 = new_session($node2, name => 'remote_waiter');
my $q1 = new_session($node1, name => 'observer1');
my $q2 = new_session($node2, name => 'observer2');

is($q1->query_safe('SELECT count(*) FROM zk_locks'), '0', 'zk_locks is empty when nothing is held');
is($q2->query_safe("SELECT count(*) FROM zk_lock_holders('iv')"), '0',
	'zk_lock_holders of a lock nobody holds returns no rows');
is($q2->query_safe('SELECT count(*) FROM zk_lock_holders(12345)'), '0', 'same with a bigint key');

$h->query_safe("SET application_name = 'tap_holder'");
$w->query_safe("SET application_name = 'tap_waiter'");
$w2->query_safe("SET application_name = 'tap_remote'");

$h->query_safe('BEGIN');
my $tok = $h->query_safe("SELECT zk_lock('iv')");
queue_request($zk, $w, "SELECT zk_lock('iv')", $IV, 2, 'waiter from cluster 1 queued');
queue_request($zk, $w2, "SELECT zk_lock('iv')", $IV, 3, 'waiter from cluster 2 queued');
my @zn = zk_lock_nodes($zk, $IV);
my @cz = map { zk_czxid($zk, $_->{path}) // -1 } @zn;

#
# zk_locks
#
my $zl = rows($q1->query_safe(
		"SELECT pid, database, name, mode, scope, state, coalesce(node, ''), "
		  . "requested_at IS NOT NULL, granted_at IS NOT NULL, token "
		  . "FROM zk_locks WHERE name = 'iv' ORDER BY requested_at"));
is(scalar(@$zl), 2, 'zk_locks on cluster 1 has the two entries of cluster 1 for iv')
  or diag explain $zl;
is_deeply([ @{ $zl->[0] // [] }[ 0 .. 9 ] ],
	[ $h->{pid}, 'postgres', 'iv', 'exclusive', 'transaction', 'held', "$IV/$zn[0]{name}", 't', 't', $tok ],
	'holder row: pid, database, name, mode, scope, state held, node path, times, token')
  or diag explain $zl;
is_deeply([ @{ $zl->[1] // [] }[ 0 .. 8 ] ],
	[ $w->{pid}, 'postgres', 'iv', 'exclusive', 'transaction', 'waiting', "$IV/$zn[1]{name}", 't', 'f' ],
	'waiter row: state waiting, node path, no granted_at')
  or diag explain $zl;
ok(zk_exists($zk, $zl->[0][6] // '/none'), "the holder's node path exists in ZooKeeper");
ok(zk_exists($zk, $zl->[1][6] // '/none'), "the waiter's node path exists in ZooKeeper");
is($tok, $cz[0], "the holder's token is its node's czxid");

is($q2->query_safe("SELECT string_agg(pid::text || ':' || state, ',') FROM zk_locks"),
	"$w2->{pid}:waiting", "zk_locks on cluster 2 shows only cluster 2's entry");

#
# zk_lock_holders, asked from the other cluster
#
my $cols = "node, mode, state, position, token, cluster, port, database, pid, usename, "
  . "application_name, host IS NOT NULL, since IS NOT NULL, data IS NOT NULL";
my $zh = rows($q2->query_safe("SELECT $cols FROM zk_lock_holders('iv') ORDER BY position"));
is(scalar(@$zh), 3, 'zk_lock_holders from cluster 2 lists three contenders') or diag explain $zh;
is_deeply($zh->[0] // [],
	[ $zn[0]{name}, 'exclusive', 'held', '0', $tok, $sysid1, $node1->port, 'postgres',
	  $h->{pid}, $user, 'tap_holder', 't', 't', 't' ],
	"cluster 1's holder: held, position 0, token, cluster id, port, database, pid, user, application_name")
  or diag explain $zh;
is_deeply($zh->[1] // [],
	[ $zn[1]{name}, 'exclusive', 'waiting', '1', $cz[1], $sysid1, $node1->port, 'postgres',
	  $w->{pid}, $user, 'tap_waiter', 't', 't', 't' ],
	"cluster 1's waiter: waiting, position 1")
  or diag explain $zh;
is_deeply($zh->[2] // [],
	[ $zn[2]{name}, 'exclusive', 'waiting', '2', $cz[2], $sysid2, $node2->port, 'postgres',
	  $w2->{pid}, $user, 'tap_remote', 't', 't', 't' ],
	"cluster 2's own waiter: waiting, position 2, its own cluster id and port")
  or diag explain $zh;
is($q1->query_safe("SELECT string_agg(pid::text || ':' || state, ',' ORDER BY position) FROM zk_lock_holders('iv')"),
	"$h->{pid}:held,$w->{pid}:waiting,$w2->{pid}:waiting",
	'cluster 1 sees the same list');
my $hdata = $q1->query_safe("SELECT data FROM zk_lock_holders('iv') WHERE position = 0");
is($hdata, zk_get($zk, "$IV/$zn[0]{name}"), 'data is the raw data of the node');
note "holder node data: $hdata; host: "
  . $q1->query_safe("SELECT host || ' since ' || since FROM zk_lock_holders('iv') WHERE position = 0");

#
# Release: rows go, the next waiter is held
#
$h->query_safe('COMMIT');
my $r = $w->wait(15);
is($r->{sqlstate}, '00000', 'cluster 1 waiter granted') or diag $r->{err};
ok(scalar(zk_wait_count($zk, $IV, 2, 5)), "the holder's node is gone");
$zl = rows($q1->query_safe("SELECT pid, state, granted_at IS NOT NULL, token FROM zk_locks WHERE name = 'iv'"));
is_deeply($zl, [ [ $w->{pid}, 'held', 't', $r->{out} ] ],
	"zk_locks: the holder's row is gone, the former waiter is held with a token")
  or diag explain $zl;
is($q2->query_safe("SELECT string_agg(pid::text || ':' || state || ':' || position, ',' ORDER BY position) FROM zk_lock_holders('iv')"),
	"$w->{pid}:held:0,$w2->{pid}:waiting:1", 'zk_lock_holders: new holder at position 0, waiter at 1');
$w->query_safe('COMMIT');
$r = $w2->wait(15);
is($r->{sqlstate}, '00000', 'cluster 2 waiter granted') or diag $r->{err};
is($q1->query_safe("SELECT count(*) FROM zk_locks WHERE name = 'iv'"), '0', "zk_locks on cluster 1: no rows for iv");
is($q2->query_safe("SELECT state FROM zk_locks WHERE name = 'iv'"), 'held', 'zk_locks on cluster 2: held');
is($q1->query_safe("SELECT cluster || ':' || pid || ':' || state FROM zk_lock_holders('iv')"),
	"$sysid2:$w2->{pid}:held", 'zk_lock_holders from cluster 1 names the cluster 2 holder');
$w2->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $IV, 0, 5)), 'no nodes left under iv');
is($q2->query_safe("SELECT count(*) FROM zk_lock_holders('iv')"), '0', 'zk_lock_holders: no rows after release');
is($q1->query_safe('SELECT count(*) FROM zk_locks'), '0', 'zk_locks empty on cluster 1');
is($q2->query_safe('SELECT count(*) FROM zk_locks'), '0', 'zk_locks empty on cluster 2');

#
# Shared, session scope, another database
#
$node1->safe_psql('postgres', 'CREATE DATABASE otherdb');
$node1->safe_psql('otherdb', 'CREATE EXTENSION zklock');
my $o = new_session($node1, name => 'otherdb', dbname => 'otherdb');
$o->query_safe("SELECT zk_session_lock_shared('iv2')");
$zl = rows($q1->query_safe("SELECT pid, database, name, mode, scope, state FROM zk_locks"));
is_deeply($zl, [ [ $o->{pid}, 'otherdb', 'iv2', 'shared', 'session', 'held' ] ],
	'zk_locks (from database postgres) shows the session shared lock of database otherdb')
  or diag explain $zl;
$o->query_safe('BEGIN');
$o->query_safe("SELECT zk_lock_shared('iv2')");
$zl = rows($q1->query_safe("SELECT pid, scope, state FROM zk_locks"));
is_deeply($zl, [ [ $o->{pid}, 'session', 'held' ] ],
	'session and transaction hold of one name: one row, scope session')
  or diag explain $zl;
$o->query_safe('COMMIT');
$o->query_safe("SELECT zk_session_lock('iv3')");
$o->query_safe('BEGIN');
$o->query_safe("SELECT zk_lock('iv3')");
is($q1->query_safe("SELECT string_agg(mode || ':' || scope, ',') FROM zk_locks WHERE name = 'iv3'"),
	'exclusive:session', 'exclusive session + transaction hold: one row, scope session');
$o->query_safe('COMMIT');

# a second shared holder: both held, positions 0 and 1
$h->query_safe('BEGIN');
$h->query_safe("SELECT zk_lock_shared('iv2')");
$zh = rows($q2->query_safe("SELECT mode, state, position, database, pid FROM zk_lock_holders('iv2') ORDER BY position"));
is_deeply($zh,
	[ [ 'shared', 'held', '0', 'otherdb', $o->{pid} ], [ 'shared', 'held', '1', 'postgres', $h->{pid} ] ],
	'zk_lock_holders: two shared holders, both held')
  or diag explain $zh;
$zl = rows($q1->query_safe("SELECT pid, mode, scope, state FROM zk_locks WHERE name = 'iv2' ORDER BY requested_at"));
is_deeply($zl,
	[ [ $o->{pid}, 'shared', 'session', 'held' ], [ $h->{pid}, 'shared', 'transaction', 'held' ] ],
	'zk_locks: both shared entries')
  or diag explain $zl;

# a writer behind them is waiting at position 2
queue_request($zk, $w, "SELECT zk_lock('iv2')", "$LOCKS/iv2", 3, 'writer queued behind the readers');
is($q2->query_safe("SELECT mode || ':' || state || ':' || position FROM zk_lock_holders('iv2') WHERE pid = $w->{pid}"),
	'exclusive:waiting:2', 'the writer is listed waiting at position 2');
is($q1->query_safe("SELECT state FROM zk_locks WHERE pid = $w->{pid}"), 'waiting', 'and waiting in zk_locks');
$h->query_safe('COMMIT');
$o->query_safe('SELECT zk_unlock_all()');
$r = $w->wait(15);
is($r->{sqlstate}, '00000', 'writer granted') or diag $r->{err};
$w->query_safe('COMMIT');

#
# bigint keys
#
$h->query_safe('BEGIN');
my $kt = $h->query_safe('SELECT zk_lock(77)');
is($q2->query_safe(q{SELECT pid || ':' || token FROM zk_lock_holders(77)}), "$h->{pid}:$kt",
	'zk_lock_holders(77) lists the holder of zk_lock(77)');
is($q2->query_safe("SELECT count(*) FROM zk_lock_holders('77')"), '1', "zk_lock_holders('77') is the same lock");
is($q1->query_safe("SELECT name || ':' || node FROM zk_locks"), "77:$LOCKS/77/" . (zk_children($zk, "$LOCKS/77"))[0],
	'zk_locks shows the decimal name and the node under /zklock/locks/77');
$h->query_safe('COMMIT');
is($q2->query_safe('SELECT count(*) FROM zk_lock_holders(77)'), '0', 'no rows after COMMIT');

$_->quit foreach ($h, $w, $w2, $q1, $q2, $o);
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper at the end');

$node1->stop;
$node2->stop;
done_testing();
