<?php
// Runs testdata/scenario.tsv with PHP's mysqlnd-based drivers and prints a
// canonical transcript of what the driver reports (see internal/clients).
//
// Environment: SP_HOST, SP_PORT, SP_USER, SP_PASSWORD, SP_DATABASE,
// SP_SCENARIO and SP_MODE, one of
//   mysqli-text      mysqli::query() for everything; parameters are
//                    escaped into the SQL with real_escape_string
//   mysqli-prepared  prepare steps with mysqli::prepare(), bind_param(),
//                    execute() and get_result()
//   pdo-native       PDO with ATTR_EMULATE_PREPARES=false (server prepares)
//   pdo-emulated     PDO with ATTR_EMULATE_PREPARES=true (client-side)
//
// PHP warnings and notices (mysqlnd reports protocol trouble that way) are
// part of the transcript. After a step that left the connection unusable
// (a warning, a call that failed without an error, or a client-side error
// 2000-2999 such as "Commands out of sync"), the program reconnects, prints
// "reconnected" and goes on, so that one broken step does not hide what
// the later ones do.

declare(strict_types=1);

error_reporting(E_ALL);
/** Set when a step left the connection unusable; the loop reconnects. */
$broken = false;

set_error_handler(function (int $no, string $msg): bool {
    global $broken;
    out('php-warning ' . $msg);
    $broken = true;
    return true;
});

function broken(): void
{
    global $broken;
    $broken = true;
}

/** Reports whether the connection must be replaced, and resets the flag. */
function take_broken(): bool
{
    global $broken;
    $b = $broken;
    $broken = false;
    return $b;
}

function out(string $line): void
{
    echo $line, "\n";
    flush();
}

function env(string $name): string
{
    $v = getenv($name);
    if ($v === false) {
        fwrite(STDERR, "missing environment variable $name\n");
        exit(2);
    }
    return $v;
}

/** Renders a value with its PHP type: 12, '12', NULL, 1.5. */
function val($v): string
{
    return var_export($v, true);
}

function params_text(array $params): string
{
    return $params ? ' [' . implode(', ', array_map('val', $params)) . ']' : '';
}

/** Parses the scenario file into steps [kind, sql, params]. */
function scenario(string $path): array
{
    $steps = [];
    foreach (file($path, FILE_IGNORE_NEW_LINES) as $line) {
        if ($line === '' || $line[0] === '#') {
            continue;
        }
        $f = explode("\t", $line);
        $params = [];
        foreach (array_slice($f, 2) as $p) {
            [$type, $v] = explode(':', $p, 2);
            $params[] = match ($type) {
                'i' => (int)$v,
                's' => $v,
                'n' => null,
            };
        }
        $steps[] = [$f[0], $f[1] ?? '', $params];
    }
    return $steps;
}

// ---- mysqli ----------------------------------------------------------------

function mi_fields(array $fields): void
{
    foreach ($fields as $f) {
        out(sprintf(
            'meta name=%s orgname=%s table=%s orgtable=%s db=%s type=%d length=%d flags=%d decimals=%d charsetnr=%d',
            $f->name, $f->orgname, $f->table, $f->orgtable, $f->db,
            $f->type, $f->length, $f->flags, $f->decimals, $f->charsetnr
        ));
    }
}

function mi_rows(mysqli_result $res): void
{
    out('rows ' . $res->num_rows);
    while (($row = $res->fetch_row()) !== null) {
        out('row ' . implode(' | ', array_map('val', $row)));
    }
}

function mi_ok(mysqli $db, $affected, $insertId): void
{
    out(sprintf('ok affected=%s insert_id=%s warnings=%d info=%s',
        val($affected), val($insertId), $db->warning_count, val($db->info)));
}

function mi_error(mysqli_sql_exception $e): void
{
    out(sprintf('error %d %s %s', $e->getCode(), $e->getSqlState(), $e->getMessage()));
    if ($e->getCode() >= 2000 && $e->getCode() < 3000) {
        broken();
    }
}

function mi_quote(mysqli $db, $v): string
{
    if ($v === null) {
        return 'NULL';
    }
    if (is_int($v)) {
        return (string)$v;
    }
    return "'" . $db->real_escape_string($v) . "'";
}

function interpolate(string $sql, array $params, callable $quote): string
{
    $i = 0;
    return preg_replace_callback('/\?/', function () use (&$i, $params, $quote) {
        return $quote($params[$i++]);
    }, $sql);
}

function run_mysqli(array $steps, bool $prepared): void
{
    mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
    $connect = fn () => new mysqli(env('SP_HOST'), env('SP_USER'), env('SP_PASSWORD'), env('SP_DATABASE'), (int)env('SP_PORT'));
    $db = $connect();
    foreach ($steps as $n => [$kind, $sql, $params]) {
        if (take_broken()) {
            $db = $connect();
            out('reconnected');
        }
        out(sprintf('> %d %s %s%s', $n + 1, $kind, $sql, params_text($params)));
        try {
            switch ($kind) {
                case 'begin':
                    out('result ' . val($db->begin_transaction()));
                    break;
                case 'commit':
                    out('result ' . val($db->commit()));
                    break;
                case 'rollback':
                    out('result ' . val($db->rollback()));
                    break;
                case 'prepare':
                    if ($prepared) {
                        $stmt = $db->prepare($sql);
                        out(sprintf('prepared params=%d fields=%d', $stmt->param_count, $stmt->field_count));
                        if ($params) {
                            $types = '';
                            foreach ($params as $p) {
                                $types .= is_int($p) ? 'i' : 's';
                            }
                            $stmt->bind_param($types, ...$params);
                        }
                        if (!$stmt->execute()) {
                            out(sprintf('failed errno=%d sqlstate=%s error=%s', $stmt->errno, $stmt->sqlstate, $stmt->error));
                            broken();
                            break;
                        }
                        $meta = $stmt->result_metadata();
                        if ($meta) {
                            mi_fields($meta->fetch_fields());
                            mi_rows($stmt->get_result());
                        } else {
                            mi_ok($db, $stmt->affected_rows, $stmt->insert_id);
                        }
                        $stmt->close();
                        break;
                    }
                    $sql = interpolate($sql, $params, fn ($v) => mi_quote($db, $v));
                    // fall through: run as text
                case 'query':
                    $res = $db->query($sql);
                    if ($res === false) {
                        out(sprintf('failed errno=%d sqlstate=%s error=%s', $db->errno, $db->sqlstate, $db->error));
                        broken();
                    } elseif ($res instanceof mysqli_result) {
                        mi_fields($res->fetch_fields());
                        mi_rows($res);
                        out(sprintf('warnings=%d', $db->warning_count));
                        $res->free();
                    } else {
                        mi_ok($db, $db->affected_rows, $db->insert_id);
                    }
                    break;
            }
        } catch (mysqli_sql_exception $e) {
            mi_error($e);
        }
    }
    $db->close();
}

// ---- PDO -------------------------------------------------------------------

function pdo_rows(PDOStatement $st): void
{
    for ($i = 0; $i < $st->columnCount(); $i++) {
        $m = $st->getColumnMeta($i);
        out(sprintf('meta name=%s table=%s native_type=%s pdo_type=%d len=%d precision=%d flags=%s',
            $m['name'], $m['table'] ?? '', $m['native_type'] ?? '(none)', $m['pdo_type'],
            $m['len'], $m['precision'], implode(',', $m['flags'])));
    }
    $rows = $st->fetchAll(PDO::FETCH_NUM);
    out('rows ' . count($rows));
    foreach ($rows as $row) {
        out('row ' . implode(' | ', array_map('val', $row)));
    }
}

/** Reports a PDO call that returned false instead of throwing. */
function pdo_failed(array $info): void
{
    out(sprintf('failed %s %s %s', val($info[1] ?? null), $info[0] ?? '', $info[2] ?? ''));
    broken();
}

function run_pdo(array $steps, bool $emulate): void
{
    $dsn = sprintf('mysql:host=%s;port=%s;dbname=%s', env('SP_HOST'), env('SP_PORT'), env('SP_DATABASE'));
    $connect = fn () => new PDO($dsn, env('SP_USER'), env('SP_PASSWORD'), [
        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
        PDO::ATTR_EMULATE_PREPARES => $emulate,
    ]);
    $db = $connect();
    foreach ($steps as $n => [$kind, $sql, $params]) {
        if (take_broken()) {
            $db = null;
            $st = null;
            $db = $connect();
            out('reconnected');
        }
        out(sprintf('> %d %s %s%s', $n + 1, $kind, $sql, params_text($params)));
        try {
            switch ($kind) {
                case 'begin':
                    out('result ' . val($db->beginTransaction()));
                    break;
                case 'commit':
                    out('result ' . val($db->commit()));
                    break;
                case 'rollback':
                    out('result ' . val($db->rollBack()));
                    break;
                case 'prepare':
                    $st = $db->prepare($sql);
                    if ($st === false) {
                        pdo_failed($db->errorInfo());
                        break;
                    }
                    foreach ($params as $i => $p) {
                        $st->bindValue($i + 1, $p, match (true) {
                            is_int($p) => PDO::PARAM_INT,
                            $p === null => PDO::PARAM_NULL,
                            default => PDO::PARAM_STR,
                        });
                    }
                    if (!$st->execute()) {
                        pdo_failed($st->errorInfo());
                        break;
                    }
                    // fall through: report the statement
                case 'query':
                    if ($kind === 'query') {
                        $st = $db->query($sql);
                        if ($st === false) {
                            pdo_failed($db->errorInfo());
                            break;
                        }
                    }
                    if ($st->columnCount() > 0) {
                        pdo_rows($st);
                    } else {
                        out(sprintf('ok affected=%s insert_id=%s', val($st->rowCount()), val($db->lastInsertId())));
                    }
                    $st->closeCursor();
                    break;
            }
        } catch (PDOException $e) {
            $info = $e->errorInfo ?? [];
            out(sprintf('error %s %s %s', val($info[1] ?? null), $info[0] ?? $e->getCode(), $info[2] ?? $e->getMessage()));
            if (($info[1] ?? 0) >= 2000 && ($info[1] ?? 0) < 3000) {
                broken();
            }
        }
    }
}

$steps = scenario(env('SP_SCENARIO'));
$mode = env('SP_MODE');
match ($mode) {
    'mysqli-text' => run_mysqli($steps, false),
    'mysqli-prepared' => run_mysqli($steps, true),
    'pdo-native' => run_pdo($steps, false),
    'pdo-emulated' => run_pdo($steps, true),
};
out('done');
