"""SQLAlchemy's counter increments, run by the tests in internal/clients/orm_test.go.

Usage: /usr/bin/python3 counters.py (Debian's python3-sqlalchemy 1.4 and
python3-mysqldb). The environment says where to connect (SP_HOST, SP_PORT,
SP_DATABASE, SP_USER, SP_PASSWORD) and what to do: SP_WORKERS threads each
run SP_ITERATIONS increments, cycling through the spellings below, then the
totals are read back through the ORM. Prints, per spelling and counter,
"inc ID COLUMN DELTA SCOPE CALLS AFFECTED" (SCOPE "-", "live": deleted_at
IS NULL, or "tenant=N"; AFFECTED "-" when the ORM does not report it), then
"total ID COLUMN VALUE" per row and counter.
"""
import os
import sys
import threading

from sqlalchemy import BigInteger, Column, DateTime, Integer, String, create_engine, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, declarative_base


def env(name):
    v = os.environ.get(name)
    if v is None:
        sys.exit("counters.py: %s is not set" % name)
    return v


Base = declarative_base()


class Repo(Base):
    __tablename__ = "repos"
    id = Column(BigInteger, primary_key=True)
    name = Column(String(100))
    downloads = Column(Integer, nullable=False, default=0)
    stars = Column(Integer, nullable=False, default=0)
    updated_at = Column(DateTime)
    deleted_at = Column(DateTime)
    tenant_id = Column(Integer, nullable=False, default=1)


workers = int(env("SP_WORKERS"))
engine = create_engine(
    "mysql+mysqldb://%s:%s@%s:%s/%s" % (env("SP_USER"), env("SP_PASSWORD"), env("SP_HOST"), env("SP_PORT"), env("SP_DATABASE")),
    pool_size=workers,
    future=True,
)


def core(stmt):
    with engine.begin() as conn:
        return conn.execute(stmt).rowcount


def retrying(transaction):
    """Runs transaction again after a deadlock or lock wait timeout, as an
    application must (the server rolled the whole transaction back)."""
    for attempt in range(6):
        try:
            return transaction()
        except OperationalError as e:
            if e.orig.args[0] not in (1213, 1205) or attempt == 5:
                raise


def session_update(stmt):
    # The ORM-enabled UPDATE through a Session (synchronize_session default).
    def transaction():
        with Session(engine) as session, session.begin():
            return session.execute(stmt).rowcount

    return retrying(transaction)


def instance_expression():
    # Assign a SQL expression to a loaded object's attribute; the flush
    # sends it as an UPDATE.
    def transaction():
        with Session(engine) as session, session.begin():
            repo = session.get(Repo, 1)
            repo.downloads = Repo.downloads + 1

    retrying(transaction)
    return None


SPELLINGS = [
    ("core-update", [(1, "downloads", 1, "-")],
     lambda: core(update(Repo).where(Repo.id == 1).values(downloads=Repo.downloads + 1))),
    ("session-update", [(1, "downloads", 1, "-")],
     lambda: session_update(update(Repo).where(Repo.id == 1).values(downloads=Repo.downloads + 1))),
    ("core-update-two", [(1, "downloads", 3, "-"), (1, "stars", 1, "-")],
     lambda: core(update(Repo).where(Repo.id == 1).values(downloads=Repo.downloads + 3, stars=Repo.stars + 1))),
    ("instance-expression", [(1, "downloads", 1, "-")], instance_expression),
    ("id-in", [(1, "stars", 1, "-")],
     lambda: core(update(Repo).where(Repo.id.in_([1])).values(stars=Repo.stars + 1))),
    ("tenant", [(2, "downloads", 1, "tenant=7")],
     lambda: core(update(Repo).where(Repo.id == 2, Repo.tenant_id == 7).values(downloads=Repo.downloads + 1))),
    ("soft-delete", [(1, "downloads", 1, "live")],
     lambda: core(update(Repo).where(Repo.id == 1, Repo.deleted_at.is_(None)).values(downloads=Repo.downloads + 1))),
    ("soft-deleted-row", [(3, "downloads", 1, "live")],
     lambda: core(update(Repo).where(Repo.id == 3, Repo.deleted_at.is_(None)).values(downloads=Repo.downloads + 1))),
]


def main():
    iterations = int(env("SP_ITERATIONS"))
    calls = [[0] * len(SPELLINGS) for _ in range(workers)]
    affected = [[0] * len(SPELLINGS) for _ in range(workers)]
    reported = [True] * len(SPELLINGS)
    errors = []

    def work(w):
        s = None
        try:
            for i in range(iterations):
                s = (w + i) % len(SPELLINGS)
                n = SPELLINGS[s][2]()
                calls[w][s] += 1
                if n is None:
                    reported[s] = False
                else:
                    affected[w][s] += n
        except BaseException as e:
            errors.append("worker %d, %s: %r" % (w, SPELLINGS[s][0] if s is not None else "-", e))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("\n".join(errors))
    for s, (_, incs, _) in enumerate(SPELLINGS):
        c = sum(calls[w][s] for w in range(workers))
        a = str(sum(affected[w][s] for w in range(workers))) if reported[s] else "-"
        for rid, col, delta, scope in incs:
            print("inc %d %s %d %s %d %s" % (rid, col, delta, scope, c, a))
    with Session(engine) as session:
        for repo in session.scalars(select(Repo).order_by(Repo.id)):
            print("total %d downloads %d" % (repo.id, repo.downloads))
            print("total %d stars %d" % (repo.id, repo.stars))
    engine.dispose()


if __name__ == "__main__":
    main()
