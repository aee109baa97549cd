"""Commands that run the service's processes: db, worker, up, listener, dispatcher, beat, flower, spark."""

from __future__ import annotations

import argparse

from autooptimize.cli.common import current_settings


def cmd_db(args: argparse.Namespace) -> int:
    from autooptimize.config import redact_url
    from autooptimize.storage.db import upgrade

    settings = current_settings()
    upgrade(settings, args.revision)
    print(f"database {redact_url(settings.database_url)} is at revision {args.revision}")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from autooptimize.cli.runtime import worker_argv
    from tasks.app import app

    app.worker_main(worker_argv(current_settings(), queues=args.queues, concurrency=args.concurrency,
                                loglevel=args.loglevel, name=args.name))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from autooptimize.cli.runtime import run_service

    return run_service(current_settings(), workers=args.workers, flower=not args.no_flower, beat=not args.no_beat,
                       console=not args.no_console)


def cmd_listener(args: argparse.Namespace) -> int:
    from autooptimize.services.submit_decided import on_attention_handler
    from scheduler.listener import main as listener_main
    from tasks.send import CeleryDispatch

    settings = current_settings()
    argv = ["--interval", str(args.interval), "--workers", str(args.workers)] + (["--once"] if args.once else [])
    return listener_main(argv, on_attention=on_attention_handler(settings, CeleryDispatch(settings)))


def cmd_dispatcher(args: argparse.Namespace) -> int:
    from scheduler.dispatcher import main as dispatcher_main

    return int(dispatcher_main(["--rebuild-only"] if args.rebuild_only else []) or 0)


def cmd_beat(args: argparse.Namespace) -> int:
    from scheduler.beat import app

    settings = current_settings()
    app.start(["beat", "-s", str(settings.home_dir / "celerybeat-schedule"), "--loglevel", args.loglevel])
    return 0


def cmd_flower(args: argparse.Namespace) -> int:
    import os

    from autooptimize.cli.runtime import flower_credentials
    from tasks.app import app

    settings = current_settings()
    user, password, path = flower_credentials(settings)
    os.environ["FLOWER_BASIC_AUTH"] = f"{user}:{password}"  # not on the command line, never logged
    where = f"password in {path}" if path else "password from AO_FLOWER_PASSWORD"
    print(f"Flower on {settings.flower_address}:{settings.flower_port} (user {user!r}, {where})", flush=True)
    app.start(["flower", f"--address={settings.flower_address}", f"--port={settings.flower_port}"])
    return 0


def cmd_spark(args: argparse.Namespace) -> int:
    from spark_actors import server

    settings = current_settings()
    if args.spark_command == "serve":
        server.serve_foreground(settings)
        return 0
    if args.spark_command == "start":
        info = server.ensure_local_server(settings)
        print(f"Spark Connect server on 127.0.0.1:{info.port} (pid {info.pid}); token in {settings.home_dir}/spark")
    elif args.spark_command == "stop":
        print("stopped" if server.stop_local_server(settings) else "no server was running")
    else:
        running = server.running_server(settings)
        print(f"running on 127.0.0.1:{running.port} (pid {running.pid})" if running else "not running")
    return 0
