"""The DRA selector reader (webhook/admission/cluster/celselect.py): the CEL that DeviceClasses and claims write in
practice read exactly, anything else taken as true (a selector it cannot read may match, never fails closed),
and hostile text never an exception. The expressions are written here after the shapes of Kubernetes' DRA CEL
environment and NVIDIA/k8s-dra-driver-gpu's classes and demos."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.cluster.celselect import MAX_DEPTH, UNKNOWN, Selector, Semver, Term, of_selectors, read

NV = "gpu.nvidia.com"
H100 = {
    (NV, "type"): "gpu",
    (NV, "productName"): "NVIDIA H100 80GB HBM3",
    (NV, "architecture"): "Hopper",
    (NV, "index"): 3,
    (NV, "cudaComputeCapability"): Semver((9, 0, 0)),
    (NV, "uuid"): UNKNOWN,
}
H100_CAPACITY = {(NV, "memory"): Fraction(81559 * 1024 * 1024)}
MIG_1G = {(NV, "type"): "mig", (NV, "profile"): "1g.10gb", (NV, "productName"): "NVIDIA A100-SXM4-80GB"}
MIG_CAPACITY = {(NV, "memory"): Fraction(9856 * 1024 * 1024)}


def selects(expression: str, attributes: dict = H100, capacity: dict = H100_CAPACITY, driver: str = NV) -> bool:
    return read([expression]).matches(driver, attributes, capacity)


def test_nvidias_class_selectors_are_read_exactly():
    gpu = read([f"device.driver == '{NV}' && device.attributes['{NV}'].type == 'gpu'"])
    assert gpu == Selector((Term("driver", ("", ""), NV, "=="), Term("attribute", (NV, "type"), "gpu", "==")))
    assert gpu.exact and (gpu.first("driver"), gpu.first("type"), gpu.first("profile")) == (NV, "gpu", "")
    assert gpu.matches(NV, H100, H100_CAPACITY) and not gpu.matches(NV, MIG_1G, MIG_CAPACITY)
    assert not gpu.matches("nic.example.com", H100, H100_CAPACITY)
    one = read([f"device.driver == '{NV}' && device.attributes['{NV}'].type == 'mig' && "
                f"device.attributes['{NV}'].profile == '1g.10gb'"])  # fmt: skip
    assert one.equal_to("profile") == ("1g.10gb",) and one.matches(NV, MIG_1G, MIG_CAPACITY)


@pytest.mark.parametrize(
    ("expression", "h100"),
    [
        (f"device.attributes['{NV}'].productName == 'NVIDIA H100 80GB HBM3'", True),
        (f'device.attributes["{NV}"].productName != "NVIDIA H100 80GB HBM3"', False),
        (f"'Hopper' == device.attributes['{NV}'].architecture", True),
        (f"device.attributes['{NV}']['architecture'] == 'Ampere'", False),
        (f"device.attributes['{NV}'].index >= 2 && device.attributes['{NV}'].index < 4", True),
        (f"device.attributes['{NV}'].index > 3", False),
        (f"4 <= device.attributes['{NV}'].index", False),
        (f"device.attributes['{NV}'].index == -1", False),
        (f"device.capacity['{NV}'].memory.compareTo(quantity('40Gi')) >= 0", True),
        (f"device.capacity['{NV}'].memory.compareTo(quantity('80Gi')) >= 0", False),
        (f"device.capacity['{NV}'].memory.isGreaterThan(quantity('79Gi'))", True),
        (f'device.capacity["{NV}"].memory.isLessThan(quantity("40Gi"))', False),
        (f"device.attributes['{NV}'].cudaComputeCapability.compareTo(semver('8.0.0')) >= 0", True),
        (f"device.attributes['{NV}'].cudaComputeCapability.isLessThan(semver('9.0.0'))", False),
        (f"device.attributes['{NV}'].cudaComputeCapability.compareTo(semver('9.0.0')) == 0", True),
        (f"((device.driver == '{NV}') && (device.attributes['{NV}'].type == 'gpu'))", True),
        (f"device.attributes['{NV}'].mig == true", False),  # no such attribute: CEL fails, nothing selected
        (f"device.attributes['{NV}'].index == '3'", False),  # a string against an int: no such overload
        (f"device.attributes['{NV}'].uuid == 'GPU-1'", True),  # not kept (unique to a device): may match
        ("device.attributes['other.example.com'].type == 'gpu'", False),  # another domain's: absent
        ("true", True),
    ],
)
def test_comparisons_on_attributes_and_capacity_are_read_exactly(expression: str, h100: bool):
    selector = read([expression])
    assert (selector.exact, selector.matches(NV, H100, H100_CAPACITY)) == (True, h100)


@pytest.mark.parametrize(
    ("expression", "unread"),
    [
        (f"device.attributes['{NV}'].productName.lowerAscii().matches('^.*h100.*$')",
         f"device.attributes['{NV}'].productName.lowerAscii().matches('^.*h100.*$')"),
        ("device.attributes['x'].index == 0 || device.attributes['x'].index == 2",
         "device.attributes['x'].index == 0 || device.attributes['x'].index == 2"),
        (f"device.driver == '{NV}' || device.attributes['{NV}'].index == 2 || device.attributes['{NV}'].type == 'x'",
         f"device.driver == '{NV}' || device.attributes['{NV}'].index == 2 || device.att..."),
        ("!(device.driver == 'nic.example.com')", "!(device.driver == 'nic.example.com')"),
        (f"'{NV}' in device.attributes", f"'{NV}' in device.attributes"),
        ("device.driver == 'a' ? true : false", "device.driver == 'a' ? true : false"),
        ("device.capacity['gpu.nvidia.com'].memory == quantity('80Gi')",
         "device.capacity['gpu.nvidia.com'].memory == quantity('80Gi')"),
        ("device.attributes['x'].y == r'raw'", "device.attributes['x'].y == r'raw'"),
        ("device.attributes['x'].y == 'a\\nb'", "device.attributes['x'].y == 'a\\nb'"),
        ("size(device.attributes) > 0", "size(device.attributes) > 0"),
        ("device.driver == 'unterminated", "device.driver == 'unterminated"),
        ("(device.driver == 'a'", "(device.driver == 'a'"),
        ("device.driver == 'a')", "device.driver == 'a')"),
        ("", "(empty)"),
        ("device.driver == 'a' &&", "device.driver == 'a' &&"),
    ],
)  # fmt: skip
def test_what_is_not_read_is_kept_as_text_and_taken_as_true(expression: str, unread: str):
    selector = read([expression])
    assert (selector.unread, selector.exact) == ((unread,), False)
    assert selector.matches(NV, H100, H100_CAPACITY), "a selector not read may match: never fewer devices"


def test_a_conjunct_not_read_leaves_the_others_read():
    selector = read([f"device.driver == '{NV}' && device.attributes['{NV}'].productName.matches('A100') && "
                     f"device.capacity['{NV}'].memory.compareTo(quantity('40Gi')) >= 0"])  # fmt: skip
    assert [t.field for t in selector.terms] == ["driver", "capacity"]
    assert selector.unread == (f"device.attributes['{NV}'].productName.matches('A100')",)
    assert selector.matches(NV, H100, H100_CAPACITY) and not selector.matches(NV, MIG_1G, MIG_CAPACITY)
    assert not selector.matches("nic.example.com", H100, H100_CAPACITY)


def test_selectors_of_a_class_or_request_all_hold():
    selectors = [{"cel": {"expression": f"device.driver == '{NV}'"}},
                 {"cel": {"expression": f"device.attributes['{NV}'].type == 'mig'"}}]  # fmt: skip
    both = of_selectors(selectors)
    assert both.exact and both.matches(NV, MIG_1G, MIG_CAPACITY) and not both.matches(NV, H100, H100_CAPACITY)
    assert of_selectors(None) == Selector() and of_selectors("x") == Selector()
    odd = of_selectors([{"cel": {"expression": 7}}, "text", {"cel": None}])
    assert odd.unread == ("(not a string)",) * 3 and odd.matches(NV, H100, H100_CAPACITY)


def test_hostile_text_is_bounded_and_never_raises():
    deep = "(" * 5000 + f"device.driver == '{NV}'" + ")" * 5000
    assert read([deep]).exact is False
    shallow = "(" * MAX_DEPTH + f"device.driver == '{NV}'" + ")" * MAX_DEPTH
    assert read([shallow]).terms == (Term("driver", ("", ""), NV, "=="),)
    huge = f"device.attributes['{NV}'].productName == '" + "x" * 20000 + "'"
    assert read([huge]).unread == ("(an expression of 20053 characters)",)
    long_ok = f"device.attributes['{NV}'].productName == '" + "x" * 9000 + "'"
    assert read([long_ok]).exact and not selects(long_ok)
    unknown_function = f"device.attributes['{NV}'].productName.startsWith('NVIDIA') && hack(device)"
    assert read([unknown_function]).matches(NV, H100, H100_CAPACITY)
    many = " && ".join(f"device.attributes['{NV}'].index != {n}" for n in range(150))
    assert len(read([many]).terms) == 150 and not selects(many)
    assert read([f"device.attributes['{NV}'].index == 99999999999999999999999"]).exact is False
    assert read(["device.attributes[1].x == 1", "device.attributes['a'] == 1", "device.x == 1"]).terms == ()
    assert read(["\x00\u2028\ud7ff", "'\\'", '"\\""']).terms == ()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("()[]'\".&|!=<>?:-_ adeivcrtbusx0123456789")), max_size=200))
def test_any_text_reads_without_raising(expression: str):
    selector = read([expression])
    assert isinstance(selector.matches(NV, H100, H100_CAPACITY), bool)
