"""Runs testdata/scenario.tsv with a Python DB-API driver and prints a
canonical transcript of what the driver reports (see internal/clients).

Usage: /usr/bin/python3 scenario.py DRIVER, where DRIVER is pymysql
(PyMySQL, pure Python) or MySQLdb (mysqlclient, on libmariadb).

Environment: SP_HOST, SP_PORT, SP_USER, SP_PASSWORD, SP_DATABASE,
SP_SCENARIO and SP_MODE, one of
  autocommit     autocommit on; "begin" is conn.begin()
  no-autocommit  the drivers' default, autocommit off: every statement is
                 in a transaction until commit() or rollback(); "begin"
                 does nothing

Both drivers interpolate parameters on the client (%s placeholders), so
prepare steps are text statements too. After a step that broke the
connection (a client-side error 2000-2999, or an exception that is not a
server error), the program reconnects, prints "reconnected" and goes on.
"""

import os
import sys


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def scenario(path):
    steps = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            fields = line.split("\t")
            params = []
            for p in fields[2:]:
                kind, value = p.split(":", 1)
                params.append(int(value) if kind == "i" else value if kind == "s" else None)
            steps.append((fields[0], fields[1] if len(fields) > 1 else "", params))
    return steps


class PyMySQL:
    """PyMySQL: what it reports after a statement."""

    def __init__(self):
        import pymysql

        self.mod = pymysql

    def connect(self, autocommit):
        return self.mod.connect(
            host=os.environ["SP_HOST"], port=int(os.environ["SP_PORT"]),
            user=os.environ["SP_USER"], password=os.environ["SP_PASSWORD"],
            database=os.environ["SP_DATABASE"], autocommit=autocommit)

    def status(self, conn, cur):
        res = conn._result  # the OK packet's fields are only kept here
        return "warnings=%r info=%r" % (res.warning_count if res else None, res.message if res else None)


class MySQLdb:
    """mysqlclient (MySQLdb): what it reports after a statement."""

    def __init__(self):
        import MySQLdb

        self.mod = MySQLdb

    def connect(self, autocommit):
        return self.mod.connect(
            host=os.environ["SP_HOST"], port=int(os.environ["SP_PORT"]),
            user=os.environ["SP_USER"], passwd=os.environ["SP_PASSWORD"],
            db=os.environ["SP_DATABASE"], autocommit=autocommit)

    def status(self, conn, cur):
        return "warnings=%r info=%r" % (conn.warning_count(), conn.info())


def run(driver, mode):
    autocommit = {"autocommit": True, "no-autocommit": False}[mode]
    conn = driver.connect(autocommit)
    broken = False
    for n, (kind, sql, params) in enumerate(scenario(os.environ["SP_SCENARIO"]), 1):
        if broken:
            try:
                conn.close()
            except Exception:
                pass
            conn = driver.connect(autocommit)
            out("reconnected")
            broken = False
        out("> %d %s %s%s" % (n, kind, sql, " %r" % (params,) if params else ""))
        try:
            if kind == "begin":
                if autocommit:
                    conn.begin()
                out("ok")
            elif kind == "commit":
                conn.commit()
                out("ok")
            elif kind == "rollback":
                conn.rollback()
                out("ok")
            else:
                cur = conn.cursor()
                if kind == "prepare":
                    cur.execute(sql.replace("?", "%s"), params)
                else:
                    cur.execute(sql)
                if cur.description is not None:
                    for d in cur.description:
                        out("meta %r" % (tuple(d),))
                    rows = cur.fetchall()
                    for row in rows:
                        out("row " + " | ".join(repr(v) for v in row))
                    out("rows %d rowcount=%r %s" % (len(rows), cur.rowcount, driver.status(conn, cur)))
                else:
                    out("ok rowcount=%r lastrowid=%r %s" % (cur.rowcount, cur.lastrowid, driver.status(conn, cur)))
                cur.close()
        except driver.mod.Error as e:
            code = e.args[0] if e.args else None
            out("error %s %r" % (type(e).__name__, e.args))
            if not isinstance(code, int) or 2000 <= code < 3000:
                broken = True
        except Exception as e:  # a driver bug or a protocol surprise
            out("exception %s %s" % (type(e).__name__, e))
            broken = True
    conn.close()
    out("done")


def main():
    drivers = {"pymysql": PyMySQL, "MySQLdb": MySQLdb}
    if len(sys.argv) != 2 or sys.argv[1] not in drivers:
        sys.exit("usage: scenario.py pymysql|MySQLdb")
    run(drivers[sys.argv[1]](), os.environ["SP_MODE"])


if __name__ == "__main__":
    main()
