
# 534_namespace_kept.pl - one namespace's share of what the root keeps
# (issue 35: "per role (and per database or namespace) limits on the nodes
# it keeps"): zklock.max_namespace_items, counted by the worker from
# ZooKeeper (src/queue/queue_nskept.c), checked against what ZooKeeper holds.
#
# Two databases, each its own namespace ('$database'), and
# zklock.max_namespace_items = 30:
#   1. Tenant A commits 10 items into each of two queues (20), and a kazoo
#      client with zklock's credentials puts 5 more into a third queue of
#      A's namespace (zk_path gives its path).  A COMMIT of 10 more fails
#      with 53400 (the census counted kazoo's items: this cluster alone
#      published 20), with the figures and a hint naming the setting, and
#      nothing of it is in ZooKeeper; a COMMIT of 5 passes (30).
#   2. Tenant B, in the other namespace, commits 10 items: its share is
#      its own.  A lock of A's still works.
#   3. An arrival of A's is an item too: refused (53400).
#   4. A consumes 10 items; about a second later (the next census) a
#      COMMIT of 10 passes again.  ZooKeeper keeps 30 of A's items.
#   5. Concurrent COMMITs in A's namespace never pass the share together:
#      8 sessions commit 5 items each at once with room for 10 (A consumed
#      10 more): at most two pass, and ZooKeeper keeps at most 30.
#   6. 0 means no limit: after a reload with 0, A commits 20 more.
# zk_namespace_totals() (group monitor) shows A's count, what was let
# through since, the bound and the refusals.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $tmp = PostgreSQL::Test::Utils::tempdir();

$ENV{ZKLOCK_ZK_AUTH} = 'zkl:secret';
my $kz = auth_kazoo($zk, 'zkl:secret');

my $auth = write_mode_file("$tmp/zk.auth", "zkl:secret\n", 0600);
my $node = zk_node('nskept', $zk,
	namespace => undef,
	conf => "zklock.auth_file = '$auth'\n"
	  . "zklock.max_namespace_items = 30\n"
	  . "zklock.max_write_rate = 0\n");

for my $db (qw(ta tb))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION zklock');
}

sub run_in
{
	my ($db, $sql) = @_;
	my $s = new_session($node, dbname => $db, name => "s_$db");
	my $r = $s->query($sql, 60);
	$s->quit;
	return $r;
}

# commit n items into queue q of database db; the result hash
sub produce
{
	my ($db, $q, $n) = @_;
	return run_in($db,
		"BEGIN; SELECT count(zk_enqueue('$q', 'x'::bytea)) FROM generate_series(1, $n); COMMIT;");
}

# items ZooKeeper keeps under a queue of database db
sub zk_items
{
	my ($db, $q) = @_;
	my $path = $node->safe_psql($db, "SELECT zk_path('queue', '$q')");
	my $ls = $kz->cmd("ls $path/entries") // '';
	return 0 if $ls eq 'ls -' || $ls =~ /NoNode/;
	return scalar(split /,/, substr($ls, 3)) if $ls =~ /^ls /;
	die "kazoo ls $path/entries: $ls";
}

sub a_items
{
	my $n = 0;
	$n += zk_items('ta', $_) for qw(qa1 qa2 qa3);
	return $n;
}

is($node->safe_psql('ta', 'SHOW zklock.max_namespace_items'), '30', 'max_namespace_items is 30');

#
# 1. A's share, counted from ZooKeeper
#
is(produce('ta', 'qa1', 10)->{sqlstate}, '00000', 'A commits 10 items into qa1');
is(produce('ta', 'qa2', 10)->{sqlstate}, '00000', 'A commits 10 items into qa2');
my $qa3 = $node->safe_psql('ta', "SELECT zk_path('queue', 'qa3')");
like($qa3, qr{^/zklock/queues/}, "qa3's path in A's namespace: $qa3");
is($kz->cmd("put $qa3 k$_"), 'ok', "kazoo puts item $_ into A's qa3") for 1 .. 5;
is(a_items(), 25, 'ZooKeeper keeps 25 items of A');
sleep 1.2;	# the census this cluster last made is older than a second

my $r = produce('ta', 'qa1', 10);
is($r->{sqlstate}, '53400', "A's COMMIT of 10 more is refused: the census counted kazoo's 5")
  or diag $r->{err};
like($r->{err}, qr/zookeeper keeps as many items of this namespace as zklock.max_namespace_items allows/,
	'the message names the setting');
like($r->{err}, qr/about 25 items of this namespace; this transaction adds 10; zklock.max_namespace_items is 30 \(namespace "ta"\)/,
	'the detail gives the figures');
like($r->{err}, qr/HINT:.*Consume items of this namespace's queues.*raise zklock.max_namespace_items/s,
	'the hint says what to do');
is(a_items(), 25, 'nothing of the refused COMMIT is in ZooKeeper');
is(produce('ta', 'qa2', 5)->{sqlstate}, '00000', 'a COMMIT of 5 fits the share');
is(a_items(), 30, 'ZooKeeper keeps 30 items of A');
is( $node->safe_psql('ta',
		"SELECT concat_ws('|', state, kept_items, reserved_items, max_items, commits_refused, "
		  . "counted_at > now() - interval '1 minute') FROM zk_namespace_totals() WHERE namespace = 'ta'"),
	'counted|25|5|30|1|t',
	"zk_namespace_totals(): A's last count (25), the 5 let through since, the bound, one refusal");
$node->safe_psql('postgres', 'CREATE ROLE nomon534 LOGIN');
$r = new_session($node, dbname => 'ta', user => 'nomon534')->query('SELECT count(*) FROM zk_namespace_totals()', 30);
is($r->{sqlstate}, '42501', 'zk_namespace_totals() is not for PUBLIC (group monitor)');

#
# 2. B's share is its own; A's locks are never refused
#
$r = produce('tb', 'qb1', 10);
is($r->{sqlstate}, '00000', "B commits 10 items in its own namespace") or diag $r->{err};
is(zk_items('tb', 'qb1'), 10, 'ZooKeeper keeps them');
is(run_in('ta', "BEGIN; SELECT zk_lock('la'); COMMIT;")->{sqlstate}, '00000',
	"A's lock and COMMIT still work");

#
# 3. arrivals are counted in the share too
#
$r = run_in('ta', "BEGIN; SELECT zk_arrive('arr', 'p1'); COMMIT;");
is($r->{sqlstate}, '53400', "A's arrival is refused at the share") or diag $r->{err};

#
# 4. consuming frees room at the next census
#
$r = run_in('ta', "BEGIN; SELECT count(*) FROM zk_dequeue('qa1', '5s', 10); COMMIT;");
is($r->{sqlstate}, '00000', 'A consumes 10 items of qa1') or diag $r->{err};
like($r->{out}, qr/^10$/m, 'ten items');
ok(wait_until(sub { a_items() == 20 }, 20), 'ZooKeeper keeps 20 items of A');
sleep 1.2;
$r = produce('ta', 'qa1', 10);
is($r->{sqlstate}, '00000', 'after the next census a COMMIT of 10 passes again') or diag $r->{err};
is(a_items(), 30, 'ZooKeeper keeps 30 items of A');

#
# 5. concurrent COMMITs do not pass the share together
#
$r = run_in('ta', "BEGIN; SELECT count(*) FROM zk_dequeue('qa2', '5s', 10); COMMIT;");
is($r->{sqlstate}, '00000', 'A consumes 10 items of qa2') or diag $r->{err};
ok(wait_until(sub { a_items() == 20 }, 20), 'room for 10');
sleep 1.2;
my @s = map { new_session($node, dbname => 'ta', name => "c$_") } 1 .. 8;
$_->query_safe("BEGIN; SELECT count(zk_enqueue('qa2', 'y'::bytea)) FROM generate_series(1, 5)") for @s;
$_->send('COMMIT') for @s;
my ($ok, $refused) = (0, 0);
for my $x (@s)
{
	my $w = $x->wait(60);
	if ($w->{sqlstate} eq '00000') { $ok++ }
	elsif ($w->{sqlstate} eq '53400') { $refused++ }
	else { diag "unexpected: $w->{sqlstate} $w->{err}" }
	$x->quit;
}
ok($ok >= 1 && $ok <= 2, "eight COMMITs of 5 at once with room for 10: $ok passed");
is($ok + $refused, 8, 'the others were refused with 53400');
my $kept = a_items();
ok($kept <= 30, "ZooKeeper keeps $kept items of A, within the share");

#
# 6. 0: no limit
#
$node->append_conf('postgresql.conf', "zklock.max_namespace_items = 0\n");
$node->reload;
ok(wait_until(sub { $node->safe_psql('ta', 'SHOW zklock.max_namespace_items') eq '0' }, 10),
	'reloaded with 0');
sleep 1;	# the worker reads the reload on its next turn
is(produce('ta', 'qa3', 20)->{sqlstate}, '00000', 'with 0, A commits 20 more');
is(a_items(), $kept + 20, 'ZooKeeper keeps them');

$node->stop;
zk_stop($zk);
done_testing();
