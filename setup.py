"""easydata-beam: tokenize, pack, mix and shard LM training data on Apache Beam; read it into JAX."""

from setuptools import find_packages, setup

setup(
    name="easydata-beam",
    version="0.1.0",
    description="Language-model data preprocessing on Apache Beam with a JAX reader",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["easydata", "easydata.*", "transforms", "transforms.*", "beam_pipelines", "beam_pipelines.*"]),
    # Read at run time, so shipped in the wheel: the named chat templates (chat.template: chatml, ...).
    package_data={"easydata.text.chat_templates": ["*.jinja", "LICENSE"]},
    install_requires=[
        "apache-beam>=2.77,<2.78",  # the Beam whose internals transforms/beam_internals.py was checked against
        "pyarrow>=14",
        "numpy>=1.24",
        "tokenizers>=0.19",
        "huggingface_hub>=0.20",
        "jinja2>=3.1",
        "fsspec>=2023.6",
        "pyyaml>=6",
        "tqdm>=4.60",
        "zstandard>=0.21",
        # tokenize.engine: auto: faster tokenizer engines, used only once verified to give tokenizers' ids
        # (easydata/text/engines.py); abi3 wheels for Linux and macOS on every supported Python.
        "fastokens>=0.3.5",
        "gigatoken>=0.10.0",
        # save.format: tfrecord: TFRecord's CRC-32C checksums (a C extension with wheels everywhere)
        "google-crc32c>=1.5",
    ],
    extras_require={
        "gcp": ["apache-beam[gcp]>=2.77,<2.78", "gcsfs>=2023.6"],
        "s3": ["s3fs>=2023.6"],
        "streaming": ["google-cloud-pubsub>=2"],
        "jax": ["jax>=0.4.20"],
        # tf.data (TokenReader.as_tf_dataset): the newest tensorflow-io and the TensorFlow it supports. TensorFlow
        # 2.16 needs numpy < 2 and so pyarrow < 21: install it in an environment of its own (docs/trainers.md).
        "tf": ["tensorflow==2.16.2", "tensorflow-io==0.37.1"],
        "plot": ["matplotlib>=3.7"],  # easydata stats --plot
        # save.format: arrayrecord (Grain's random-access files); wheels for Linux and macOS
        "arrayrecord": ["array-record>=0.8"],
        # --runner=DaskRunner (the versions apache-beam[dask] asks for)
        "dask": ["dask>=2024.4.2", "distributed>=2024.4.2"],
        # pandas, duckdb and datasets: tests prove the shards load in the tools users already have.
        "dev": ["pytest>=7", "hypothesis>=6.80", "pytest-timeout>=2.1",
                # ruff: the lint step of .ci/run (ruff.toml says which rules)
                "ruff>=0.5", "pandas>=2", "duckdb>=1", "datasets>=2.18",
                # jax: the reader's as_jax/as_pmap tests on simulated CPU devices
                "jax>=0.4.20",
                # matplotlib: easydata stats --plot is tested
                "matplotlib>=3.7",
                # s3fs + moto's standalone server: the s3:// round trip against a real S3-compatible server
                "s3fs>=2023.6", "moto[server]>=5",
                # google-cloud-pubsub: the streaming test against the Pub/Sub emulator
                "google-cloud-pubsub>=2",
                # dask + distributed: the DaskRunner test on a real local cluster
                "dask>=2024.4.2", "distributed>=2024.4.2",
                # array-record: the arrayrecord output format is written and read in the tests
                "array-record>=0.8",
                # jsonschema: the Dataflow Flex Template metadata.json files are validated against their schema
                "jsonschema>=4.18",
                # transformers: EasyData's documented blocks use AutoTokenizer / apply_chat_template, and
                # the chat-template tests compare our rendering with it
                "transformers>=4.40"],
    },
    entry_points={"console_scripts": ["easydata=easydata.cli:console_main"]},
)
