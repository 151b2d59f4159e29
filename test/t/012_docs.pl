
# 012_docs.pl - the user documentation is complete and its examples run.
#
# 1. Every function of the extension (pg_proc rows that depend on it in
#    pg_depend) is documented: some Markdown heading of doc/*.md names it in
#    backticks with its argument list, e.g.
#        ### `zk_lock(name text, timeout interval DEFAULT NULL) → bigint`
#    (overloads share one section; a view's function behind it is named in
#    the view's heading: ## `zk_locks` (view over `zk_locks_internal()`)).
#    Every zklock.* setting of pg_settings is documented: a table row of
#    doc/*.md starts with it in backticks (| `zklock.hosts` | ...).  And the
#    other way round: a heading that documents a zk_ function the catalog
#    does not have fails too.
# 2. Every SQL example runs: the fenced blocks whose info string is exactly
#    "sql" (also indented ones, in lists) of README.md and each doc/*.md, in
#    the order of the file, in one psql session per file (psql meta-commands
#    such as \gset and \if work), in a fresh database with the extension, on
#    a cluster with the default namespace ('$database'), zklock.elections =
#    'cron' and its own ZooKeeper; the extension is installed as
#    doc/install.md recommends (CREATE SCHEMA zk; CREATE EXTENSION zklock
#    SCHEMA zk; the database's search_path "$user", public, zk).  Before a file's blocks the test creates
#    what the examples assume of the user's own schema (tables, procedures,
#    roles, databases: %FIXTURE below; never zklock objects).  A block
#    marked ```sql norun is shown but not run: only for an example that needs
#    another session or server at the same moment (a barrier of three), with
#    the reason in the text around it.  Any error fails the file, naming the
#    block's line.  ZKLOCK_DOCS_VERBOSE=1 shows what every file's examples
#    printed.
# 3. doc/reference.md (every function, view and setting on one page) is
#    what tools/reference.py makes of the pages: never out of date.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $SRC = $ZkLockTest::SRC;
my @docs = ('README.md', map { s{^\Q$SRC\E/}{}r } sort glob("$SRC/doc/*.md"));
ok(@docs > 10, 'README.md and doc/*.md found (' . scalar(@docs) . ' files)');

sub slurp_doc
{
	my ($f) = @_;
	open(my $fh, '<', "$SRC/$f") or die "$f: $!";
	local $/;
	return <$fh>;
}

# the fenced blocks of a file: [info string, first line number, text]
sub blocks
{
	my ($text) = @_;
	my (@out, $cur);
	my $n = 0;
	for my $line (split /\n/, $text)
	{
		$n++;
		if (!$cur && $line =~ /^(\s*)```\s*(\S.*?)?\s*$/)
		{
			$cur = { indent => length($1), info => $2 // '', line => $n + 1, text => '' };
		}
		elsif ($cur && $line =~ /^\s*```\s*$/)
		{
			push @out, $cur;
			undef $cur;
		}
		elsif ($cur)
		{
			my $l = $line;
			$l =~ s/^ {0,$cur->{indent}}//;
			$cur->{text} .= "$l\n";
		}
	}
	return @out;
}

# the headings of a file, outside fenced blocks
sub headings
{
	my ($text) = @_;
	my ($fence, @h) = (0);
	for my $line (split /\n/, $text)
	{
		if ($line =~ /^\s*```/) { $fence = !$fence; next; }
		push @h, $line if !$fence && $line =~ /^#{1,6} /;
	}
	return @h;
}

# ---- 1. completeness against the catalog ----
my $zk = zk_start();
my $node = zk_node('docs', $zk, namespace => undef, conf => "zklock.elections = 'cron'\n");

my %documented;    # function name -> file
my %setting_rows;  # setting -> file
for my $f (grep { m{^doc/} } @docs)
{
	my $text = slurp_doc($f);
	for my $h (headings($text))
	{
		$documented{$1} //= $f while $h =~ /`(zk_\w+)\(/g;
	}
	for my $line (split /\n/, $text)
	{
		$setting_rows{$1} //= $f if $line =~ /^\|\s*`(zklock\.\w+)`\s*\|/;
	}
}
my @funcs = split /\n/, $node->safe_psql('postgres', q{
	SELECT DISTINCT p.proname FROM pg_depend d
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock'
	  JOIN pg_proc p ON p.oid = d.objid
	 WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e' ORDER BY 1});
ok(@funcs > 40, scalar(@funcs) . ' functions in the extension');
my @undoc = grep { !$documented{$_} } @funcs;
is(join(', ', @undoc), '', 'every function of the extension has a heading in doc/*.md');
my %infunc = map { $_ => 1 } @funcs;
my @ghost = grep { !$infunc{$_} } sort keys %documented;
is(join(', ', @ghost), '', 'every function a doc heading documents exists');

my @settings = split /\n/, $node->safe_psql('postgres',
	q{SELECT name FROM pg_settings WHERE name LIKE 'zklock.%' ORDER BY 1});
ok(@settings >= 10, scalar(@settings) . ' zklock settings');
my @unset = grep { !$setting_rows{$_} } @settings;
is(join(', ', @unset), '', 'every zklock setting has a table row in doc/*.md');

# ---- 2. the examples run ----
# What the examples assume of the user's own schema, per file
my $ROLES = q{
DO $$ DECLARE r text; BEGIN
  FOREACH r IN ARRAY ARRAY['app_worker', 'app_producer', 'reporting'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('CREATE ROLE %I', r);
    END IF;
  END LOOP;
END $$;
};
my %FIXTURE = (
	'README.md' => q{},
	'doc/locks.md' => q{
CREATE TABLE remote_ledger_writes (token bigint, what text);
},
	'doc/queues.md' => q{
CREATE TABLE orders (id int, status text);
CREATE TABLE processed (msg_id bigint);
},
	'doc/semaphores.md' => q{
CREATE PROCEDURE make_report() LANGUAGE sql AS $$ SELECT 1 $$;
},
	'doc/leases.md' => q{
CREATE PROCEDURE make_hourly_report() LANGUAGE sql AS $$ SELECT 1 $$;
},
	'doc/install.md' => $ROLES,
	'doc/security.md' => $ROLES . q{
SELECT 'CREATE DATABASE ' || d FROM unnest(ARRAY['sales', 'billing']) d
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = d) \gexec
},
	'doc/guide-etl.md' => q{
SELECT 'CREATE DATABASE ' || d FROM unnest(ARRAY['sales', 'billing', 'crm', 'warehouse']) d
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = d) \gexec
\c sales
CREATE EXTENSION IF NOT EXISTS zklock;
CREATE SCHEMA staging;
CREATE TABLE sales (day date, amount int);
CREATE TABLE staging.sales (day date, amount int);
\c billing
CREATE EXTENSION IF NOT EXISTS zklock;
CREATE SCHEMA staging;
CREATE TABLE invoices (day date, amount int);
CREATE TABLE staging.invoices (day date, amount int);
\c crm
CREATE EXTENSION IF NOT EXISTS zklock;
CREATE SCHEMA staging;
CREATE TABLE contacts (day date, name text);
CREATE TABLE staging.contacts (day date, name text);
\c warehouse
CREATE EXTENSION IF NOT EXISTS zklock;
},
	# pg_cron itself is not in this test's cluster: cron.schedule here runs
	# the job's command once, at once, so the command is checked to run
	'doc/guide-pg-cron.md' => q{
CREATE SCHEMA cron;
CREATE FUNCTION cron.schedule(job text, schedule text, command text) RETURNS bigint
LANGUAGE plpgsql AS $$ BEGIN EXECUTE command; RETURN 1; END $$;
CREATE FUNCTION make_report() RETURNS void LANGUAGE sql AS $$ SELECT $$;
CREATE FUNCTION cleanup() RETURNS void LANGUAGE sql AS $$ SELECT $$;
CREATE PROCEDURE export() LANGUAGE sql AS $$ SELECT 1 $$;
},
);

my ($nblocks, $nnorun) = (0, 0);
for my $f (@docs)
{
	my @sql = grep { $_->{info} =~ /^sql(\s|$)/ } blocks(slurp_doc($f));
	next unless @sql;
	my @run = grep { $_->{info} eq 'sql' } @sql;
	my @norun = grep { $_->{info} eq 'sql norun' } @sql;
	my @odd = grep { $_->{info} ne 'sql' && $_->{info} ne 'sql norun' } @sql;
	is(join(', ', map { "line $_->{line}: $_->{info}" } @odd), '',
		"$f: every sql block is marked sql or sql norun");
	$nnorun += @norun;
	next unless @run;
	$nblocks += @run;
	(my $db = "doc_$f") =~ s/[^a-z0-9]+/_/gi;
	$db = lc $db;
	# installed as doc/install.md recommends: in a schema of the superuser's,
	# on the search_path of the database's sessions
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk;
		ALTER DATABASE $db SET search_path = "\$user", public, zk});
	my $script = "\\set ON_ERROR_STOP 1\n" . ($FIXTURE{$f} // '') . "\n\\c $db\n";
	for my $b (@run)
	{
		$script .= "\\echo '>>> $f line $b->{line}'\n$b->{text}";
	}
	my ($out, $err, $timed_out) = ('', '', 0);
	my $rc = $node->psql($db, $script, stdout => \$out, stderr => \$err,
		on_error_stop => 1, timeout => 180, timed_out => \$timed_out);
	$err .= "\n(timed out after 180 s)" if $timed_out;
	my ($last) = reverse($out =~ /^>>> (.*)$/mg);
	note "output of $f:\n$out\n$err" if $ENV{ZKLOCK_DOCS_VERBOSE};
	is($rc, 0, "$f: its " . scalar(@run) . ' sql examples run')
	  or diag "failed in the block at " . ($last // 'the fixture') . "\nstderr:\n$err";
}
ok($nblocks > 40, "$nblocks sql examples ran ($nnorun marked norun)");

# 3. doc/reference.md is what tools/reference.py makes of the pages now
my ($ref_out, $ref_err) = ('', '');
my $ref_ok = IPC::Run::run([ $ZkLockTest::PYTHON, "$SRC/tools/reference.py", '--check' ],
	'>', \$ref_out, '2>', \$ref_err);
ok($ref_ok, 'doc/reference.md is up to date (tools/reference.py --check)') or diag $ref_err;

$node->stop;
zk_stop($zk);
done_testing();
