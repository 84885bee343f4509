<?php
// Laravel's counter increments (Illuminate Database 8: the query builder and
// Eloquent), run by the tests in internal/clients/orm_test.go.
//
// Usage: php counters.php (Debian's php-illuminate-database and php-mysql).
// The environment says where to connect (SP_HOST, SP_PORT, SP_DATABASE,
// SP_USER, SP_PASSWORD) and what to do: SP_WORKERS processes (forked, as
// PHP serves requests) each run SP_ITERATIONS increments, cycling through
// the spellings below, then the totals are read back through Eloquent.
// Prints, per spelling and counter, "inc ID COLUMN DELTA SCOPE CALLS
// AFFECTED" (SCOPE "-", "live": deleted_at IS NULL, or "tenant=N";
// AFFECTED "-" when the ORM does not report it), then "total ID COLUMN
// VALUE" per row and counter.
declare(strict_types=1);

require '/usr/share/php/Illuminate/Database/autoload.php';

use Illuminate\Database\Capsule\Manager as DB;
use Illuminate\Database\Eloquent\Model;
use Illuminate\Database\Eloquent\SoftDeletes;

function env(string $name): string
{
    $v = getenv($name);
    if ($v === false) {
        fwrite(STDERR, "counters.php: $name is not set\n");
        exit(1);
    }
    return $v;
}

// connect sets up the connections: "default" with Laravel's own PDO options
// (server-side prepares), "emulated" with PDO's emulated prepares (the
// values inlined into the text by PDO).
function connect(): void
{
    $db = new DB();
    $config = [
        'driver' => 'mysql', 'host' => env('SP_HOST'), 'port' => env('SP_PORT'),
        'database' => env('SP_DATABASE'), 'username' => env('SP_USER'), 'password' => env('SP_PASSWORD'),
        'charset' => 'utf8mb4', 'collation' => 'utf8mb4_general_ci', 'prefix' => '', 'strict' => true,
    ];
    $db->addConnection($config);
    $db->addConnection($config + ['options' => [PDO::ATTR_EMULATE_PREPARES => true]], 'emulated');
    $db->setAsGlobal();
    $db->bootEloquent();
}

// An Eloquent model with timestamps (increment() touches updated_at) and
// soft deletes (every query adds deleted_at IS NULL).
class Repo extends Model
{
    use SoftDeletes;

    const CREATED_AT = null;
    const UPDATED_AT = 'updated_at';
    protected $table = 'repos';
}

// [name, [[id, column, delta, scope]], function returning affected rows or null]
function spellings(): array
{
    return [
        ['builder', [[1, 'downloads', 1, '-']], fn () => DB::table('repos')->where('id', 1)->increment('downloads')],
        ['builder-by', [[1, 'stars', 5, '-']], fn () => DB::table('repos')->where('id', 1)->increment('stars', 5)],
        ['builder-extra', [[1, 'downloads', 1, '-']],
            fn () => DB::table('repos')->where('id', 1)->increment('downloads', 1, ['updated_at' => date('Y-m-d H:i:s')])],
        ['builder-string-id', [[1, 'downloads', 1, '-']], fn () => DB::table('repos')->where('id', '1')->increment('downloads')],
        ['emulated', [[1, 'downloads', 1, '-']],
            fn () => DB::connection('emulated')->table('repos')->where('id', 1)->increment('downloads')],
        ['emulated-string-id', [[1, 'downloads', 1, '-']],
            fn () => DB::connection('emulated')->table('repos')->where('id', '1')->increment('downloads')],
        ['tenant', [[2, 'downloads', 1, 'tenant=7']],
            fn () => DB::table('repos')->where('id', 2)->where('tenant_id', 7)->increment('downloads')],
        ['eloquent', [[1, 'downloads', 1, 'live']], fn () => Repo::where('id', 1)->increment('downloads')],
        ['eloquent-instance', [[1, 'downloads', 1, 'live']], fn () => Repo::findOrFail(1)->increment('downloads')],
        ['eloquent-soft-deleted', [[3, 'downloads', 1, 'live']], fn () => Repo::where('id', 3)->increment('downloads')],
    ];
}

function worker(int $w, int $iterations): array
{
    connect();
    $spellings = spellings();
    $calls = array_fill(0, count($spellings), 0);
    $affected = array_fill(0, count($spellings), 0);
    for ($i = 0; $i < $iterations; $i++) {
        $s = ($w + $i) % count($spellings);
        $n = $spellings[$s][2]();
        $calls[$s]++;
        $affected[$s] = $n === null || $affected[$s] === null ? null : $affected[$s] + (int)$n;
    }
    return ['calls' => $calls, 'affected' => $affected];
}

$workers = (int)env('SP_WORKERS');
$iterations = (int)env('SP_ITERATIONS');
$children = [];
for ($w = 0; $w < $workers; $w++) {
    [$parentEnd, $childEnd] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
    $pid = pcntl_fork();
    if ($pid < 0) {
        fwrite(STDERR, "fork failed\n");
        exit(1);
    }
    if ($pid === 0) {
        fclose($parentEnd);
        try {
            fwrite($childEnd, json_encode(worker($w, $iterations)));
            $code = 0;
        } catch (Throwable $e) {
            fwrite(STDERR, "worker $w: " . get_class($e) . ': ' . $e->getMessage() . "\n");
            $code = 1;
        }
        fclose($childEnd);
        exit($code);
    }
    fclose($childEnd);
    $children[$w] = [$pid, $parentEnd];
}
$spellings = spellings();
$calls = array_fill(0, count($spellings), 0);
$affected = array_fill(0, count($spellings), 0);
$failed = false;
foreach ($children as $w => [$pid, $sock]) {
    $data = stream_get_contents($sock);
    fclose($sock);
    pcntl_waitpid($pid, $status);
    if (!pcntl_wifexited($status) || pcntl_wexitstatus($status) !== 0) {
        $failed = true;
        continue;
    }
    $r = json_decode($data, true);
    foreach ($spellings as $s => $_) {
        $calls[$s] += $r['calls'][$s];
        $affected[$s] = $r['affected'][$s] === null || $affected[$s] === null ? null : $affected[$s] + $r['affected'][$s];
    }
}
if ($failed) {
    exit(1);
}
foreach ($spellings as $s => [$_, $incs]) {
    foreach ($incs as [$id, $col, $delta, $scope]) {
        printf("inc %d %s %d %s %d %s\n", $id, $col, $delta, $scope, $calls[$s], $affected[$s] ?? '-');
    }
}
connect();
foreach (Repo::withTrashed()->orderBy('id')->get() as $repo) {
    printf("total %d downloads %d\n", $repo->id, $repo->downloads);
    printf("total %d stars %d\n", $repo->id, $repo->stars);
}
