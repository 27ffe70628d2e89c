"""Producer.prepare on any machine: what it refuses. Publishing prepared device
columns is tested on a GPU (test_gpu.py)."""
import numpy as np
import pyarrow as pa
import pytest

from gpuring import GpuringError, Producer, Ring


@pytest.mark.parametrize("data", [pa.table({"x": [1, 2, 3]}), {"x": np.arange(3)}, {}, [1, 2]],
                         ids=["arrow-table", "numpy-dict", "empty-dict", "list"])
def test_prepare_refuses_what_is_not_device_columns(ring_name, data):
    Ring.create(ring_name).close()
    with Producer.open(ring_name) as producer:
        with pytest.raises(GpuringError) as e:
            producer.prepare(data)
        assert e.value.code == "INVALID_ARGUMENT" and "device columns" in str(e.value)
        assert producer.in_flight == 0


def test_prepare_on_a_closed_producer_fails_with_closed(ring_name):
    Ring.create(ring_name).close()
    producer = Producer.open(ring_name)
    producer.close()
    with pytest.raises(GpuringError) as e:
        producer.prepare({"x": np.arange(3)})
    assert e.value.code == "CLOSED"
