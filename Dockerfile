# One image for every role (migrate, spark-connect, actor, control, listener, dispatcher, beat, flower, demo).
# bookworm, pinned: Debian trixie has no openjdk-17, which Spark needs.
FROM python:3.11-slim-bookworm
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
# AO_HOME (/data) belongs to the non-root user; a named volume mounted there starts with this owner
RUN useradd --create-home --uid 10001 autooptimize \
    && mkdir -p /data \
    && chown autooptimize:autooptimize /data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY autooptimize ./autooptimize
COPY tasks ./tasks
COPY scheduler ./scheduler
COPY spark_actors ./spark_actors
COPY migrations ./migrations
RUN pip install --no-cache-dir '.[rest,glue,hive]'
USER autooptimize
ENV AO_HOME=/data PYTHONUNBUFFERED=1
ENTRYPOINT ["autooptimize"]
CMD ["--help"]
