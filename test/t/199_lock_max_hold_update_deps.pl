
# 199_lock_max_hold_update_deps.pl - the 1.0 -> 1.1 update drops
# the 1.0 forms of the waiting lock functions (DROP FUNCTION zk_lock(text,
# interval) ...: max_hold is a new argument, issue 39).  A user object that
# depends on one of them - a view, or a SQL-standard function body (BEGIN
# ATOMIC), which records its dependency on the function it calls - makes
# ALTER EXTENSION zklock UPDATE fail: "cannot drop function zk_lock(text,
# interval) because other objects depend on it".  A 1.0 database that used
# zk_lock in such a function cannot be updated without dropping the user's
# objects first.  That is the documented behaviour now (the update stops and
# changes nothing); this test holds it.

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
# documented (CHANGELOG.md, doc/install.md "Upgrading"): such an object
# stops the update, which changes nothing; drop it, update, create it again
isnt($rc, 0, 'ALTER EXTENSION zklock UPDATE stops at a user function that depends on zk_lock(text, interval)');
like($err, qr/cannot drop function zk_lock\(text,interval\) because other objects depend on it/,
	'and says which function and why');
like($err, qr/run_job/, 'and names the dependent object');
is($node->safe_psql('deps', "SELECT extversion FROM pg_extension WHERE extname = 'zklock'"),
	'1.0', 'the extension stays 1.0');
is($node->safe_psql('deps', 'BEGIN; SELECT run_job() > 0; COMMIT;'), 't', 'the user function still works');
$node->safe_psql('deps', 'DROP FUNCTION run_job()');
$node->safe_psql('deps', "ALTER EXTENSION zklock UPDATE TO '1.1'");
$node->safe_psql('deps', q{
CREATE FUNCTION run_job() RETURNS bigint
  LANGUAGE sql BEGIN ATOMIC SELECT zk_lock('job'); END;
});
is($node->safe_psql('deps', 'BEGIN; SELECT run_job() > 0; COMMIT;'), 't',
	'dropped, updated and created again, it works with 1.1');
done_testing();
