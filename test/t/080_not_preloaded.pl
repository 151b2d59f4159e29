
# 080_not_preloaded.pl - without shared_preload_libraries, CREATE EXTENSION
# and every call fail with 55000 and a hint, and nothing half-made is left.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('nopreload');
$node->init;
$node->start;

my ($rc, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION zklock',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($rc, 0, 'CREATE EXTENSION fails without preloading');
like($err, qr/ERROR:\s+55000: zklock must be loaded via shared_preload_libraries/,
	'with SQLSTATE 55000 and a clear message');
like($err, qr/HINT:\s+Add zklock to shared_preload_libraries/, 'and a hint');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_extension WHERE extname = 'zklock'"),
	'0', 'no extension was created');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_proc WHERE proname LIKE 'zk\\_%'"),
	'0', 'no function was left behind');

# a server that preloads it after a restart works
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'zklock'\n");
$node->restart;
($rc, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION zklock');
is($rc, 0, 'CREATE EXTENSION works once preloaded') or diag $err;
is($node->safe_psql('postgres', 'SELECT state FROM zk_status()'),
	'not configured', 'with no zklock.hosts the worker says so');
($rc, $out, $err) = $node->psql('postgres',
	"SET zklock.connect_timeout = '200ms'; SELECT zk_try_lock('x')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/08006/, 'a call without zklock.hosts fails with 08006, not a hang');

$node->stop;
done_testing();
