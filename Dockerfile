# One image for every role (migrate, spark-connect, actor, control, beat, flower).
FROM python:3.11-slim
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 autooptimize
WORKDIR /app
COPY pyproject.toml README.md ./
COPY autooptimize ./autooptimize
COPY tasks ./tasks
COPY scheduler ./scheduler
COPY spark_actors ./spark_actors
COPY migrations ./migrations
RUN pip install --no-cache-dir .
USER autooptimize
ENV AO_HOME=/data PYTHONUNBUFFERED=1
ENTRYPOINT ["autooptimize"]
CMD ["--help"]
