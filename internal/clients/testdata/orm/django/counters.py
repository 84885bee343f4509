"""Django's counter increments, run by the tests in internal/clients/orm_test.go.

Usage: /usr/bin/python3 counters.py (Debian's python3-django and
python3-mysqldb). The environment says where to connect (SP_HOST, SP_PORT,
SP_DATABASE, SP_USER, SP_PASSWORD) and what to do (SP_MODE):

counters  SP_WORKERS threads each run SP_ITERATIONS increments, cycling
          through the spellings below, then the totals are read back
          through the ORM. Prints, per spelling and counter,
          "inc ID COLUMN DELTA SCOPE CALLS AFFECTED" (SCOPE "-", "live":
          deleted_at IS NULL, or "tenant=N"; AFFECTED "-" when the ORM does
          not report it), then "total ID COLUMN VALUE" per row and counter.
bench     SP_WORKERS threads run SP_BENCH_TX transactions in all, each an
          increment of repo 1 (SP_BENCH_SPELLING "orm": the ORM's F()
          expression, "raw": the textbook SQL on the same connection) and
          SP_WORK_MS of simulated work before COMMIT. Prints
          "bench TX SECONDS RETRIES".
"""
import os
import sys
import threading
import time

import django
from django.conf import settings


def env(name, default=None):
    v = os.environ.get(name, default)
    if v is None:
        sys.exit("counters.py: %s is not set" % name)
    return v


settings.configure(
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": env("SP_DATABASE"),
            "USER": env("SP_USER"),
            "PASSWORD": env("SP_PASSWORD"),
            "HOST": env("SP_HOST"),
            "PORT": env("SP_PORT"),
        }
    },
    INSTALLED_APPS=[],
    USE_TZ=False,
)
django.setup()

from django.db import connection, models, transaction  # noqa: E402
from django.db.models import F  # noqa: E402
from django.db.utils import OperationalError  # noqa: E402


class LiveManager(models.Manager):
    """The soft-delete scope (as django-safedelete and friends add it)."""

    def get_queryset(self):
        return super().get_queryset().filter(deleted_at__isnull=True)


class Repo(models.Model):
    id = models.BigIntegerField(primary_key=True)
    name = models.CharField(max_length=100)
    downloads = models.IntegerField(default=0)
    stars = models.IntegerField(default=0)
    updated_at = models.DateTimeField(null=True)
    deleted_at = models.DateTimeField(null=True)
    tenant_id = models.IntegerField(default=1)

    objects = models.Manager()
    live = LiveManager()

    class Meta:
        app_label = "counters"
        db_table = "repos"
        managed = False


def save_f():
    # The instance spelling: assign an F() expression and save that field.
    repo = Repo(pk=1)
    repo.downloads = F("downloads") + 1
    repo.save(update_fields=["downloads"])
    return None


# (name, [(id, column, delta, scope)], function returning affected rows or None)
SPELLINGS = [
    ("filter-update", [(1, "downloads", 1, "-")],
     lambda: Repo.objects.filter(pk=1).update(downloads=F("downloads") + 1)),
    ("filter-update-two", [(1, "downloads", 2, "-"), (1, "stars", 1, "-")],
     lambda: Repo.objects.filter(pk=1).update(downloads=F("downloads") + 2, stars=F("stars") + 1)),
    ("instance-save", [(1, "downloads", 1, "-")], save_f),
    ("id-in", [(1, "stars", 1, "-")],
     lambda: Repo.objects.filter(id__in=[1]).update(stars=F("stars") + 1)),
    ("tenant", [(2, "downloads", 1, "tenant=7")],
     lambda: Repo.objects.filter(pk=2, tenant_id=7).update(downloads=F("downloads") + 1)),
    ("tenant-other", [(1, "downloads", 1, "tenant=7")],
     lambda: Repo.objects.filter(pk=1, tenant_id=7).update(downloads=F("downloads") + 1)),
    ("soft-delete", [(1, "downloads", 1, "live")],
     lambda: Repo.live.filter(pk=1).update(downloads=F("downloads") + 1)),
    ("soft-deleted-row", [(3, "downloads", 1, "live")],
     lambda: Repo.live.filter(pk=3).update(downloads=F("downloads") + 1)),
]


def run_workers(n, target):
    errors = []

    def wrap(w):
        try:
            target(w)
        except BaseException as e:  # report, do not hang
            errors.append("worker %d: %r" % (w, e))
        finally:
            connection.close()

    threads = [threading.Thread(target=wrap, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("\n".join(errors))


def counters():
    workers = int(env("SP_WORKERS"))
    iterations = int(env("SP_ITERATIONS"))
    calls = [[0] * len(SPELLINGS) for _ in range(workers)]
    affected = [[0] * len(SPELLINGS) for _ in range(workers)]
    reported = [True] * len(SPELLINGS)

    def work(w):
        for i in range(iterations):
            s = (w + i) % len(SPELLINGS)
            n = SPELLINGS[s][2]()
            calls[w][s] += 1
            if n is None:
                reported[s] = False
            else:
                affected[w][s] += n

    run_workers(workers, work)
    for s, (_, incs, _) in enumerate(SPELLINGS):
        c = sum(calls[w][s] for w in range(workers))
        a = str(sum(affected[w][s] for w in range(workers))) if reported[s] else "-"
        for rid, col, delta, scope in incs:
            print("inc %d %s %d %s %d %s" % (rid, col, delta, scope, c, a))
    for repo in Repo.objects.order_by("id"):
        print("total %d downloads %d" % (repo.id, repo.downloads))
        print("total %d stars %d" % (repo.id, repo.stars))
    connection.close()


def bench():
    workers = int(env("SP_WORKERS"))
    total = int(env("SP_BENCH_TX"))
    work_s = float(env("SP_WORK_MS")) / 1000.0
    spelling = env("SP_BENCH_SPELLING")
    lock = threading.Lock()
    left = [total]
    retries = [0]

    def increment():
        if spelling == "orm":
            Repo.objects.filter(pk=1).update(downloads=F("downloads") + 1)
        else:
            with connection.cursor() as c:
                c.execute("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")

    def work(w):
        Repo.objects.filter(pk=1).exists()  # connect before the clock starts
        barrier.wait()
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            while True:
                try:
                    with transaction.atomic():
                        increment()
                        time.sleep(work_s)
                    break
                except OperationalError as e:
                    if e.args[0] not in (1213, 1205):
                        raise
                    with lock:
                        retries[0] += 1

    barrier = threading.Barrier(workers + 1)
    started = []

    def clock():
        barrier.wait()
        started.append(time.monotonic())

    t = threading.Thread(target=clock)
    t.start()
    run_workers(workers, work)
    t.join()
    print("bench %d %.6f %d" % (total, time.monotonic() - started[0], retries[0]))


if __name__ == "__main__":
    {"counters": counters, "bench": bench}[env("SP_MODE")]()
