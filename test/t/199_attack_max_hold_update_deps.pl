
# 199_attack_max_hold_update_deps.pl - (attack) the 1.0 -> 1.1 update drops
# the 1.0 forms of the waiting lock functions (DROP FUNCTION zk_lock(text,
# interval) ...: max_hold is a new argument, issue 39).  A user object that
# depends on one of them - a view, or a SQL-standard function body (BEGIN
# ATOMIC), which records its dependency on the function it calls - makes
# ALTER EXTENSION zklock UPDATE fail: "cannot drop function zk_lock(text,
# interval) because other objects depend on it".  A 1.0 database that used
# zk_lock in such a function cannot be updated without dropping the user's
# objects first.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('upddeps', $zk);

$node->safe_psql('postgres', 'CREATE DATABASE deps');
$node->safe_psql('deps', "CREATE EXTENSION zklock VERSION '1.0'");
$node->safe_psql('deps', q{
CREATE FUNCTION run_job() RETURNS bigint
  LANGUAGE sql BEGIN ATOMIC SELECT zk_lock('job'); END;
});
is($node->safe_psql('deps', 'BEGIN; SELECT run_job() > 0; COMMIT;'), 't', 'the user function works with 1.0');
my ($rc, $out, $err) = $node->psql('deps', "ALTER EXTENSION zklock UPDATE TO '1.1'");
is($rc, 0, 'ALTER EXTENSION zklock UPDATE succeeds with a user function that calls zk_lock')
  or diag($err);
is($node->safe_psql('deps', "SELECT extversion FROM pg_extension WHERE extname = 'zklock'"),
	'1.1', 'the extension is 1.1');
done_testing();
