
# 532_write_quotas.pl - what one role may write into the shared ZooKeeper
# and keep there (issue 35, items 2 and 9), checked against what ZooKeeper
# really holds.
#
# zklock.max_locks = 64, so zklock.max_locks_per_role defaults to 16.
#
#   1. Defaults: max_write_rate 256 kB/s, max_write_burst 1 MB,
#      max_transaction_size 256 kB, max_item_size 16 kB, max_kept_items
#      10000, max_locks_per_role a quarter of max_locks.
#   2. The producer attack, scaled down: a role with only "produce" and
#      ALTER ROLE ... SET max_write_rate 16 kB/s, burst 128 kB: an item over
#      max_item_size and a transaction over max_transaction_size fail with
#      54000 at the call; a COMMIT of 60 kB goes (120 kB charged: the
#      transaction node, then the item); the next is refused at once (53400,
#      hint names max_write_rate) instead of waiting 7 s; one COMMIT larger
#      than the burst alone fails with 54000 (hint: max_write_burst).
#      ZooKeeper holds exactly the one item and no transaction node.
#      Meanwhile another role locks, enqueues and commits.
#   3. A rate the role can wait for: 64 kB/s, the second COMMIT waits
#      about 1.75 s, then goes through.  ALTER ROLE ... SET raises the rate
#      for that role only: its next COMMITs go at once.  zk_quotas shows
#      the role's writes, refusals and rate.
#   4. Kept items: ALTER ROLE ... SET max_kept_items = 5: 3 items, then 3
#      more in one transaction fail at COMMIT with 53400 (counted from
#      ZooKeeper), ZooKeeper still holds 3 and no transaction node; another
#      role (default bound) still enqueues there.  Arrivals: 2 kept, the
#      third refused, ZooKeeper holds 2.
#   5. Item 9: two roles, two sessions each, take all the entries they may
#      (16 each); a third role still gets its locks.  zk_quotas shows the
#      entries against the quota.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('wquotas', $zk,
	connect_timeout => '5s',
	conf => "zklock.max_locks = 64\n");

sub q1 { return out_or_error($node, $_[0]); }

sub qpath { return q1("SELECT zk_path('queue', '$_[0]')"); }
sub items { return zk_count($zk, qpath($_[0]) . '/entries'); }
sub txns { return zk_count($zk, '/zklock/txns'); }

#
# 1. defaults
#
is(q1('SHOW zklock.max_write_rate'), '256kB', 'max_write_rate defaults to 256 kB (per second)');
is(q1('SHOW zklock.max_write_burst'), '1MB', 'max_write_burst defaults to 1 MB');
is(q1('SHOW zklock.max_transaction_size'), '256kB', 'max_transaction_size defaults to 256 kB');
is(q1('SHOW zklock.max_item_size'), '16kB', 'max_item_size defaults to 16 kB');
is(q1('SHOW zklock.max_kept_items'), '10000', 'max_kept_items defaults to 10000');
is(q1('SHOW zklock.max_locks_per_role'), '16', 'max_locks_per_role defaults to a quarter of max_locks');

$node->safe_psql('postgres', q{
CREATE ROLE prod532 LOGIN;
CREATE ROLE other532 LOGIN;
CREATE ROLE arr532 LOGIN;
CREATE ROLE t1 LOGIN; CREATE ROLE t2 LOGIN; CREATE ROLE t3 LOGIN;
SELECT zk_grant('produce', 'prod532');
SELECT zk_grant('produce', 'other532'); SELECT zk_grant('lock', 'other532');
SELECT zk_grant('arrive', 'arr532');
SELECT zk_grant('lock', r::regrole) FROM unnest(ARRAY['t1', 't2', 't3']) r;
ALTER ROLE prod532 SET zklock.max_write_rate = '16kB';
ALTER ROLE prod532 SET zklock.max_write_burst = '128kB';
});

#
# 2. the producer attack, scaled down
#
my $p = new_session($node, name => 'prod', user => 'prod532');
is($p->query_safe('SHOW zklock.max_write_rate'), '16kB', 'ALTER ROLE ... SET gives the producer 16 kB/s');
my $r = $p->query("SELECT zk_enqueue('wq', repeat('x', 20000))");
is($r->{sqlstate}, '54000', 'an item over max_item_size: 54000 at the call');
like($r->{err}, qr/HINT:.*zklock\.max_item_size/, 'hint names zklock.max_item_size') or diag $r->{err};
$r = $p->query('SET zklock.max_item_size = \'64kB\'');
is($r->{sqlstate}, '42501', 'the role cannot raise max_item_size itself (42501)');
$node->safe_psql('postgres', "ALTER ROLE prod532 SET zklock.max_item_size = '64kB'");
$p->quit;
$p = new_session($node, name => 'prod2', user => 'prod532');
$r = $p->query("BEGIN; SELECT zk_enqueue('wq', repeat('x', 60000)); "
	  . "SELECT zk_enqueue('wq', repeat('x', 60000)); "
	  . "SELECT zk_enqueue('wq', repeat('x', 60000)); "
	  . "SELECT zk_enqueue('wq', repeat('x', 60000)); SELECT zk_enqueue('wq', repeat('x', 60000))");
is($r->{sqlstate}, '54000', 'a transaction over max_transaction_size: 54000 at the call');
like($r->{err}, qr/HINT:.*zklock\.max_transaction_size/, 'hint names zklock.max_transaction_size')
  or diag $r->{err};
$p->query('ROLLBACK');

$r = $p->query("SELECT zk_enqueue('wq', repeat('a', 60000))");
is($r->{sqlstate}, '00000', 'a COMMIT of 60 kB goes (within the burst)') or diag $r->{err};
is(items('wq'), 1, 'ZooKeeper holds its item');
my $t0 = time;
$r = $p->query("SELECT zk_enqueue('wq', repeat('b', 60000))");
my $took = time - $t0;
is($r->{sqlstate}, '53400', 'the next COMMIT is refused: 53400') or diag $r->{err};
like($r->{err}, qr/faster than zklock\.max_write_rate/, 'message names the rate') or diag $r->{err};
like($r->{err}, qr/HINT:.*zklock\.max_write_rate/, 'hint names zklock.max_write_rate');
ok($took < 2.5, sprintf('refused at once (%.2f s), not after waiting the 7 s it would need', $took));
$r = $p->query("BEGIN; SELECT zk_enqueue('wq', repeat('c', 60000)); "
	  . "SELECT zk_enqueue('wq', repeat('c', 60000)); COMMIT");
is($r->{sqlstate}, '54000', 'a COMMIT larger than the burst by itself: 54000') or diag $r->{err};
like($r->{err}, qr/HINT:.*zklock\.max_write_burst/, 'hint names zklock.max_write_burst');
is(items('wq'), 1, 'ZooKeeper still holds the one item: nothing of the refused transactions');
is(txns(), 0, 'and no transaction node');

my $o = new_session($node, name => 'other', user => 'other532');
$r = $o->query("BEGIN; SELECT zk_lock('o532', '5s'); SELECT zk_enqueue('oq', 'o'); COMMIT");
is($r->{sqlstate}, '00000', 'meanwhile another role locks, enqueues and commits') or diag $r->{err};
is(items('oq'), 1, 'its item is in ZooKeeper');

#
# 3. a rate the role can wait for; ALTER ROLE ... SET for one role
#
$node->safe_psql('postgres', "ALTER ROLE prod532 SET zklock.max_write_rate = '64kB'");
$p->quit;
sleep 2.5;		# the 16 kB/s bucket drains what is left of the burst
$p = new_session($node, name => 'prod3', user => 'prod532');
$r = $p->query("SELECT zk_enqueue('wq', repeat('d', 60000))");
is($r->{sqlstate}, '00000', 'at 64 kB/s: a COMMIT of 60 kB') or diag $r->{err};
$t0 = time;
$r = $p->query("SELECT zk_enqueue('wq', repeat('e', 60000))");
$took = time - $t0;
is($r->{sqlstate}, '00000', 'the next one waits for the rate and goes through') or diag $r->{err};
ok($took > 0.8 && $took < 4.5, sprintf('it waited %.2f s (about 1.75 s to pay for it)', $took));
is(items('wq'), 3, 'ZooKeeper holds 3 items');

$node->safe_psql('postgres', "ALTER ROLE prod532 SET zklock.max_write_rate = '10MB'; "
	  . "ALTER ROLE prod532 SET zklock.max_write_burst = '10MB'");
$p->quit;
$p = new_session($node, name => 'prod4', user => 'prod532');
$t0 = time;
$r = $p->query(join('; ', ("SELECT zk_enqueue('wq2', repeat('f', 60000))") x 4), 60);
$took = time - $t0;
is($r->{sqlstate}, '00000', 'ALTER ROLE ... SET raised the rate: four COMMITs of 60 kB') or diag $r->{err};
ok($took < 2.5, sprintf('at once (%.2f s)', $took));
is(items('wq2'), 4, 'ZooKeeper holds them');
my $row = q1("SELECT max_write_rate || '|' || max_write_burst || '|' || (bytes_written > 600000) || '|' || writes_refused FROM zk_quotas WHERE role = 'prod532'");
is($row, (10 * 1048576) . '|' . (10 * 1048576) . '|true|2', 'zk_quotas: the role\'s rate and burst, what it wrote, its 2 refusals');
$p->quit;

#
# 4. kept items, counted from ZooKeeper
#
$node->safe_psql('postgres', 'ALTER ROLE prod532 SET zklock.max_kept_items = 5');
$p = new_session($node, name => 'prod5', user => 'prod532');
$r = $p->query("BEGIN; SELECT zk_enqueue('kq', 'k' || i) FROM generate_series(1, 3) i; COMMIT");
is($r->{sqlstate}, '00000', 'max_kept_items 5: 3 items go') or diag $r->{err};
$t0 = time;
$r = $p->query("BEGIN; SELECT zk_enqueue('kq', 'l' || i) FROM generate_series(1, 3) i; COMMIT");
$took = time - $t0;
is($r->{sqlstate}, '53400', '3 more in one transaction: 53400 at COMMIT') or diag $r->{err};
like($r->{err}, qr/keeps 3 items under .*adds 3.*zklock\.max_kept_items is 5/s, 'detail: as ZooKeeper counts them')
  or diag $r->{err};
like($r->{err}, qr/HINT:.*zklock\.max_kept_items/, 'hint names zklock.max_kept_items');
ok($took < 3, sprintf('at once (%.2f s)', $took));
is(items('kq'), 3, 'ZooKeeper still holds 3');
# the transaction node went beside the count (issue 40): the rollback deletes it
ok(wait_until(sub { txns() == 0 }, 10), 'and no transaction node left: nothing of it published')
  or diag txns();
$r = $p->query("SELECT zk_enqueue('kq', 'm')");
is($r->{sqlstate}, '00000', 'one more fits (4 of 5)') or diag $r->{err};
$r = $o->query("BEGIN; SELECT zk_enqueue('kq', 'o' || i) FROM generate_series(1, 3) i; COMMIT");
is($r->{sqlstate}, '00000', 'another role, with the default bound, still enqueues there') or diag $r->{err};
is(items('kq'), 7, 'ZooKeeper holds 7');
$p->quit;

$node->safe_psql('postgres', 'ALTER ROLE arr532 SET zklock.max_kept_items = 2');
my $a = new_session($node, name => 'arr', user => 'arr532');
$r = $a->query("SELECT zk_arrive('ka', 'p1'); SELECT zk_arrive('ka', 'p2')");
is($r->{sqlstate}, '00000', 'arrivals: 2 go') or diag $r->{err};
$r = $a->query("SELECT zk_arrive('ka', 'p3')");
is($r->{sqlstate}, '53400', 'the third is refused: 53400') or diag $r->{err};
my $apath = q1("SELECT zk_path('arrivals', 'ka')");
is(zk_count($zk, $apath), 2, 'ZooKeeper holds 2 arrivals');
is(txns(), 0, 'and no transaction node');
$a->quit;
$o->quit;

#
# 5. item 9: two roles cannot starve a third
#
create_hog($node);    # hog(tag, max): session locks until refused (ZkLockTest.pm)
my @s;
my $total = 0;
foreach my $role ('t1', 't2')
{
	foreach my $k (1, 2)
	{
		my $s = new_session($node, name => "$role-$k", user => $role);
		my $out = $s->query_safe("SELECT hog('$role-$k-')", 120);
		my ($n, $st) = split /\|/, $out;
		note "$role session $k: $out";
		$total += $n;
		push @s, $s;
	}
}
is($total, 32, 'two roles, two sessions each, take 32 entries: 16 each, the quarter each may');
is(q1("SELECT string_agg(role || ':' || entries || '/' || max_entries, ',' ORDER BY role) FROM zk_quotas WHERE role IN ('t1', 't2')"),
	't1:16/16,t2:16/16', 'zk_quotas: each role at its quota');
my $t3 = new_session($node, name => 't3', user => 't3');
is($t3->query_safe("SELECT hog('t3-', 10)", 120), '10|none', 'a third role still gets its locks');
$t3->quit;
$_->quit foreach @s;

done_testing();
