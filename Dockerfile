# easydata-beam on Dataflow: ONE image that is both
#   - the Flex Template launcher image (gcloud dataflow flex-template build --image=IMAGE), and
#   - the Beam SDK worker container (--parameters sdk_container_image=IMAGE),
# so the job graph is built and executed by the same Python, Beam, cloudpickle (vendored by Beam) and
# easydata. Build:  docker build -t IMAGE .   or   gcloud builds submit --tag IMAGE .
# docs/dataflow.md has the whole workflow; tests/test_dataflow_template.py checks this file statically.
#
# Pinned: the base images by tag (for bit-for-bit rebuilds pin them by digest, `image@sha256:...`), every
# Python package by templates/dataflow/requirements.txt, whose apache-beam pin equals the Beam tag below.
# The Python environment is exactly that file (a slim Python base, not Beam's SDK image with its own
# preinstalled set), which was resolved and `pip check`ed as one set.

# The Flex Template launcher binary (Python 3.11 flavour).
FROM gcr.io/dataflow-templates-base/python311-template-launcher-base:20230622_RC00 AS launcher

# Beam's worker boot program for Python 3.11 and Beam 2.77.0.
FROM apache/beam_python3.11_sdk:2.77.0 AS beam

FROM python:3.11-slim-bookworm

COPY --from=launcher /opt/google/dataflow/python_template_launcher /opt/google/dataflow/python_template_launcher
COPY --from=beam /opt/apache/beam /opt/apache/beam

# RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT: workers use this image's Python environment, where every pinned
# package is installed; Beam's boot would otherwise create a virtualenv at every worker start.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1

WORKDIR /template

# Dependencies first, in their own layer: editing the code does not reinstall them.
COPY templates/dataflow/requirements.txt /template/requirements.txt
RUN pip install --no-cache-dir -r /template/requirements.txt

# Then the project itself (no dependency resolution: everything is pinned above).
COPY setup.py README.md /template/
COPY easydata /template/easydata
COPY transforms /template/transforms
COPY beam_pipelines /template/beam_pipelines
COPY templates/dataflow/main.py /template/main.py
RUN pip install --no-cache-dir --no-deps /template \
    && rm -rf /template/build /template/*.egg-info \
    && pip check \
    && python -c "import apache_beam, easydata, transforms, beam_pipelines.flex_template; print('beam', apache_beam.__version__)"

# Flex Template launcher configuration: the file it runs. easydata is installed for the launcher and the
# workers alike, so neither FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE nor FLEX_TEMPLATE_PYTHON_SETUP_FILE is
# set: they would make every launch and worker start install it again. (To run workers on Beam's default
# image instead of this one, pass the template parameter setup_file=/template/setup.py.)
ENV FLEX_TEMPLATE_PYTHON_PY_FILE=/template/main.py

# A non-root user for running the CLI from this image (`docker run --user easydata --entrypoint easydata
# IMAGE run ...`). The image itself stays root: Dataflow's launcher writes /var/log/dataflow and its workers
# use host directories under /var/opt/google owned by root, so neither side starts as another user.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin easydata

# The Beam SDK worker entrypoint (Dataflow starts workers with it; for a launch Dataflow runs
# /opt/google/dataflow/python_template_launcher itself).
ENTRYPOINT ["/opt/apache/beam/boot"]
