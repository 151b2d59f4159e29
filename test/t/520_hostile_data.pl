
# 520_hostile_data.pl - what another ZooKeeper client writes into zklock's
# nodes is bounded and checked (issue 23, "hostile data").
#
#   1. Arrivals: a child of 70,000 bytes (longer than any participant zklock
#      writes, and than a 16-bit length) beside two real arrivals, and
#      children named by its first 2,000 to 2,600 bytes (one of them is
#      what a path cut at the worker's buffer would name).
#      zk_arrivals lists the two real ones whole and the worker survives
#      (before, the 16-bit length wrapped and the backend read past the
#      answer); zk_arrivals_reset removes the real ones and leaves the
#      foreign node alone.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('hostA', $zk);
sub sql { return $A->safe_psql('postgres', $_[0]); }

my $wpid = worker_pid($A);
sql("SELECT zk_arrive('hostile', 'p1')");
sql("SELECT zk_arrive('hostile', 'p2')");
# the long name, and one that is its start as long as a path the worker
# builds can be (so that a cut path would find a node)
my $long = 'a' x 70000;
my ($rc, $out, $err) = zkq($zk, 'create', "/zklock/arrivals/hostile/$long", 'x' x 2000);
is($rc, 0, 'another client put a child of 70,000 bytes among the arrivals') or diag $err;
foreach my $n (2000, 2582, 2583, 2600)
{
	($rc, $out, $err) = zkq($zk, 'create', "/zklock/arrivals/hostile/" . ('a' x $n), 'y');
	is($rc, 0, "and one of $n bytes") or diag $err;
}

my $r = one_shot($A, "SELECT string_agg(participant, ',' ORDER BY participant) FROM zk_arrivals('hostile')", 60);
is($r->{sqlstate}, '00000', 'zk_arrivals answers') or diag $r->{err};
is($r->{out}, 'p1,p2', 'with the two real arrivals only, whole');
is(worker_pid($A), $wpid, 'the worker did not crash');
is(sql("SELECT zk_arrivals_reset('hostile')"), '2', 'zk_arrivals_reset removes the two real arrivals');
ok(zk_exists($zk, "/zklock/arrivals/hostile/$long"), "and leaves the other client's node alone");
is(worker_pid($A), $wpid, 'the worker is still the same');

done_testing();
