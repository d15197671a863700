//! Conversions between the runtime's types and Python objects.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use wasi_python_runtime::Completed;

/// How a run or turn ended, as the package reads it by attribute (`Completed`).
#[pyclass(module = "wasi_python._wasi_python", frozen, get_all)]
pub(crate) struct Outcome {
    exit_code: Option<i32>,
    stdout: Py<PyBytes>,
    stderr: Py<PyBytes>,
    trapped: Option<String>,
    /// The streams cut at the output cap: "stdout", "stderr".
    truncated: Vec<&'static str>,
    fuel_used: Option<u64>,
    file_bytes_written: u64,
    files: Option<Py<PyDict>>,
    tools: Option<Py<ToolRecord>>,
    duration_s: f64,
    /// Each kept display's JSON object, in order (the package decodes them).
    displays: Vec<Py<PyBytes>>,
    /// Display frames answered `bad`.
    bad_displays: u64,
}

impl Outcome {
    pub(crate) fn new(py: Python<'_>, c: Completed) -> PyResult<Outcome> {
        Ok(Outcome {
            exit_code: c.exit_code,
            stdout: PyBytes::new(py, &c.stdout).unbind(),
            stderr: PyBytes::new(py, &c.stderr).unbind(),
            trapped: c.trapped.as_ref().map(|t| t.as_str().to_owned()),
            truncated: c.truncated.names(),
            fuel_used: c.fuel_used,
            file_bytes_written: c.file_bytes_written,
            files: c.files.as_ref().map(|r| crate::files::record(py, r).map(Bound::unbind)).transpose()?,
            tools: c.tools.as_ref().map(|r| Py::new(py, ToolRecord::new(py, r)?)).transpose()?,
            duration_s: c.duration.as_secs_f64(),
            displays: c.displays.iter().map(|d| PyBytes::new(py, d.json()).unbind()).collect(),
            bad_displays: c.bad_displays,
        })
    }
}

/// One frame of the tool record (`wasi_python.tools.ToolCall` is made from it).
#[pyclass(module = "wasi_python._wasi_python", frozen, get_all)]
pub(crate) struct ToolOutcome {
    seq: u64,
    op: &'static str,
    tool: Option<String>,
    outcome: &'static str,
    message: Option<String>,
    request_bytes: u64,
    response_bytes: u64,
    fault: Option<String>,
    abandoned: bool,
    delivered: bool,
}

/// A run's (or turn's) tool record.
#[pyclass(module = "wasi_python._wasi_python", frozen, get_all)]
pub(crate) struct ToolRecord {
    frames: u64,
    unlisted: u64,
    outcomes: Vec<Py<ToolOutcome>>,
    abandoned: Vec<Py<ToolOutcome>>,
}

impl ToolRecord {
    fn new(py: Python<'_>, r: &wasi_python_runtime::record::ToolRecord) -> PyResult<ToolRecord> {
        let list = |os: &[Outcome_]| -> PyResult<Vec<Py<ToolOutcome>>> {
            os.iter()
                .map(|o| {
                    Py::new(
                        py,
                        ToolOutcome {
                            seq: o.seq,
                            op: o.op.as_str(),
                            tool: o.tool.clone(),
                            outcome: o.outcome.as_str(),
                            message: o.message.clone(),
                            request_bytes: o.request_bytes,
                            response_bytes: o.response_bytes,
                            fault: o.fault.clone(),
                            abandoned: o.abandoned,
                            delivered: o.delivered,
                        },
                    )
                })
                .collect()
        };
        Ok(ToolRecord { frames: r.frames, unlisted: r.unlisted, outcomes: list(&r.outcomes)?, abandoned: list(&r.abandoned)? })
    }
}

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple, PyType};
use wasi_python_runtime::protocol::{MAX_DEPTH, MAX_INT_CHARS, Map, Value};
use wasi_python_runtime::record::Outcome as Outcome_;

/// A guest value as a Python object: bytes for `$bytes`, int for wide integers.
pub(crate) fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(n) => n.into_pyobject(py)?.into_any(),
        Value::BigInt(s) => py.get_type::<PyInt>().call1((s.as_ref(),))?,
        Value::Float(f) => PyFloat::new(py, *f).into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => map_to_dict(py, map)?.into_any(),
        other => return Err(PyValueError::new_err(format!("unsupported value {other:?}"))),
    })
}

pub(crate) fn map_to_dict<'py>(py: Python<'py>, map: &Map) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in map.iter() {
        d.set_item(k, value_to_py(py, v)?)?;
    }
    Ok(d)
}

/// `numbers.Integral` and `numbers.Real`: numpy's integers and floats are JSON,
/// its `bool_` (registered as neither) is not.
fn numbers_abcs(py: Python<'_>) -> PyResult<(&Bound<'_, PyType>, &Bound<'_, PyType>)> {
    static INTEGRAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static REAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    Ok((
        INTEGRAL.import(py, "numbers", "Integral")?,
        REAL.import(py, "numbers", "Real")?,
    ))
}

/// A tool's result as a protocol value. The error names what is not JSON and where.
pub(crate) fn py_to_value(obj: &Bound<'_, PyAny>) -> Result<Value, String> {
    to_value(obj, 0, &mut String::from("the result"))
}

fn not_json(obj: &Bound<'_, PyAny>, at: &str, why: &str) -> String {
    let ty = obj
        .get_type()
        .fully_qualified_name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    format!("{at} is not JSON: {ty} {why}")
}

fn int_value(obj: &Bound<'_, PyAny>, at: &str) -> Result<Value, String> {
    if let Ok(n) = obj.extract::<i64>() {
        return Ok(Value::Int(n));
    }
    let text = obj.str().map_err(|e| e.to_string())?.to_string();
    if text.len() > MAX_INT_CHARS {
        return Err(format!("{at} is an integer of more than {MAX_INT_CHARS} digits"));
    }
    Value::big_int(&text).ok_or_else(|| format!("{at} is not a valid integer"))
}

fn to_value(obj: &Bound<'_, PyAny>, depth: usize, at: &mut String) -> Result<Value, String> {
    if depth >= MAX_DEPTH - 2 {
        return Err(format!("{at} nests deeper than {} levels", MAX_DEPTH - 2));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return int_value(obj, at);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let v = f.value();
        return if v.is_finite() { Ok(Value::Float(v)) } else { Err(format!("{at} is {v}; only finite numbers cross")) };
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s.to_str().map(|s| Value::Str(s.to_owned())).map_err(|_| format!("{at} is a str with lone surrogates"));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Value::Bytes(b.as_bytes().to_vec()));
    }
    if obj.is_instance_of::<PyByteArray>() || obj.is_instance_of::<PyMemoryView>() {
        let b: Vec<u8> = obj.call_method0("__bytes__").and_then(|b| b.extract()).or_else(|_| {
            obj.py().get_type::<PyBytes>().call1((obj,)).and_then(|b| b.extract())
        }).map_err(|e| e.to_string())?;
        return Ok(Value::Bytes(b));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (i, item) in obj.try_iter().map_err(|e| e.to_string())?.enumerate() {
            let item = item.map_err(|e| e.to_string())?;
            let len = at.len();
            at.push_str(&format!("[{i}]"));
            items.push(to_value(&item, depth + 1, at)?);
            at.truncate(len);
        }
        return Ok(Value::Array(items));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let Ok(key) = k.cast::<PyString>() else {
                return Err(not_json(&k, &format!("a key of {at}"), "(keys must be str)"));
            };
            let key = key.to_str().map_err(|_| format!("a key of {at} has lone surrogates"))?.to_owned();
            if key == "$bytes" {
                return Err(format!("{at} has a \"$bytes\" key, which the protocol reserves"));
            }
            let len = at.len();
            at.push_str(&format!("[{key:?}]"));
            let value = to_value(&v, depth + 1, at)?;
            at.truncate(len);
            map.push(key, value);
        }
        return Ok(Value::Object(map));
    }
    let py = obj.py();
    let (integral, real) = numbers_abcs(py).map_err(|e| e.to_string())?;
    if obj.is_instance(integral).unwrap_or(false) {
        let as_int = obj.call_method0("__index__").or_else(|_| py.get_type::<PyInt>().call1((obj,)));
        return as_int.map_err(|e| e.to_string()).and_then(|i| int_value(&i, at));
    }
    if obj.is_instance(real).unwrap_or(false) {
        let v: f64 = obj.extract().map_err(|e: PyErr| e.to_string())?;
        return if v.is_finite() { Ok(Value::Float(v)) } else { Err(format!("{at} is {v}; only finite numbers cross")) };
    }
    let hint = if obj.hasattr("tolist").unwrap_or(false) {
        "(call .tolist() or convert it, e.g. bool(x) for numpy.bool_)"
    } else if obj.hasattr("to_dict").unwrap_or(false) {
        "(call .to_dict() first)"
    } else {
        ""
    };
    Err(not_json(obj, at, hint).trim_end().to_owned())
}

pub(crate) fn json_arg(text: &str, what: &str) -> PyResult<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| PyTypeError::new_err(format!("{what} is not JSON: {e}")))
}
