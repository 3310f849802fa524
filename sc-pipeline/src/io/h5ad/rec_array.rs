//! numpy record arrays (anndata's `rec-array` encoding, e.g. `uns['rank_genes_groups']['names']`):
//! HDF5 compound datasets, read one field at a time and written as a compound of the fields.
//!
//! HDF5 converts a compound to any compound whose members it can match by name, so a field is
//! read through a one-member memory type. The hdf5 crate describes memory types statically
//! (`H5Type::type_descriptor()` takes no arguments), so the member's name is handed to it through
//! a thread-local set just around the read.

use super::hdf5_access::H5Ctx;
use crate::anndata::ArrayData;
use crate::Result;
use hdf5::types::{CompoundField, CompoundType, FloatSize, IntSize, TypeDescriptor, VarLenUnicode};
use hdf5::{Dataset, H5Type};
use std::cell::RefCell;

thread_local! {
    static FIELD_NAME: RefCell<String> = const { RefCell::new(String::new()) };
}

/// One member of a compound, named by `FIELD_NAME` at the time of the call.
#[repr(transparent)]
#[derive(Clone)]
struct Field<T>(T);

// SAFETY: the descriptor is a compound with a single member of type T at offset 0 and the size
// of T, which is exactly the layout of the transparent wrapper.
unsafe impl<T: H5Type> H5Type for Field<T> {
    fn type_descriptor() -> TypeDescriptor {
        let name = FIELD_NAME.with(|n| n.borrow().clone());
        TypeDescriptor::Compound(CompoundType {
            fields: vec![CompoundField {
                name,
                ty: T::type_descriptor(),
                offset: 0,
                index: 0,
            }],
            size: std::mem::size_of::<T>(),
        })
    }
}

fn read_field<T: H5Type + Clone>(ds: &Dataset, name: &str) -> hdf5::Result<Vec<T>> {
    FIELD_NAME.with(|n| *n.borrow_mut() = name.to_string());
    let out = ds.read_raw::<Field<T>>();
    FIELD_NAME.with(|n| n.borrow_mut().clear());
    Ok(out?.into_iter().map(|f| f.0).collect())
}

/// Reads every field of a 1-D compound dataset.
pub(crate) fn read_rec_array(
    ctx: &H5Ctx,
    ds: &Dataset,
    element: &str,
) -> Result<Vec<(String, ArrayData)>> {
    let fields = match ctx.descriptor(ds, element)? {
        TypeDescriptor::Compound(c) => c.fields,
        other => {
            return Err(ctx.format(
                element,
                format!("rec-array must be a compound type, is {other}"),
            ))
        }
    };
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let el = format!("{element} field '{}'", f.name);
        let h5 = ctx.h5(&el);
        let data = match &f.ty {
            TypeDescriptor::Float(FloatSize::U4) => {
                ArrayData::F32(read_field::<f32>(ds, &f.name).map_err(h5)?)
            }
            TypeDescriptor::Float(FloatSize::U8) => {
                ArrayData::F64(read_field::<f64>(ds, &f.name).map_err(h5)?)
            }
            TypeDescriptor::Integer(IntSize::U8) | TypeDescriptor::Unsigned(_) => {
                ArrayData::I64(read_field::<i64>(ds, &f.name).map_err(h5)?)
            }
            TypeDescriptor::Integer(_) => {
                ArrayData::I32(read_field::<i32>(ds, &f.name).map_err(h5)?)
            }
            TypeDescriptor::Boolean => {
                ArrayData::Bool(read_field::<bool>(ds, &f.name).map_err(h5)?)
            }
            TypeDescriptor::VarLenUnicode | TypeDescriptor::VarLenAscii => ArrayData::Str(
                read_field::<VarLenUnicode>(ds, &f.name)
                    .map_err(h5)?
                    .iter()
                    .map(|s| String::from_utf8_lossy(s.as_bytes()).into_owned())
                    .collect(),
            ),
            other => return Err(ctx.format(&el, format!("unsupported field type {other}"))),
        };
        out.push((f.name, data));
    }
    Ok(out)
}

/// Writes a record array: a compound dataset built field by field (each field written through
/// its one-member memory type).
pub(crate) fn write_rec_array(
    ctx: &H5Ctx,
    parent: &hdf5::Group,
    name: &str,
    fields: &[(String, ArrayData)],
    element: &str,
) -> Result<Dataset> {
    let len = fields.first().map_or(0, |(_, d)| d.len());
    if let Some((bad, d)) = fields.iter().find(|(_, d)| d.len() != len) {
        return Err(ctx.format(
            element,
            format!(
                "field '{bad}' has {} values, the first field {len}",
                d.len()
            ),
        ));
    }
    let mut offset = 0;
    let mut members = Vec::with_capacity(fields.len());
    for (index, (fname, data)) in fields.iter().enumerate() {
        let ty = match data {
            ArrayData::Bool(_) => bool::type_descriptor(),
            ArrayData::I32(_) => i32::type_descriptor(),
            ArrayData::I64(_) => i64::type_descriptor(),
            ArrayData::F32(_) => f32::type_descriptor(),
            ArrayData::F64(_) => f64::type_descriptor(),
            ArrayData::Str(_) => VarLenUnicode::type_descriptor(),
        };
        let size = ty.size();
        members.push(CompoundField {
            name: fname.clone(),
            ty,
            offset,
            index,
        });
        offset += size;
    }
    let compound = TypeDescriptor::Compound(CompoundType {
        fields: members,
        size: offset,
    });
    let dtype = hdf5::Datatype::from_descriptor(&compound).map_err(ctx.h5(element))?;
    let ds = parent
        .new_dataset_builder()
        .empty_as(&dtype)
        .shape(len)
        .create(name)
        .map_err(ctx.h5(element))?;
    for (fname, data) in fields {
        FIELD_NAME.with(|n| *n.borrow_mut() = fname.clone());
        let written = match data {
            ArrayData::Bool(v) => write_field(&ds, v),
            ArrayData::I32(v) => write_field(&ds, v),
            ArrayData::I64(v) => write_field(&ds, v),
            ArrayData::F32(v) => write_field(&ds, v),
            ArrayData::F64(v) => write_field(&ds, v),
            ArrayData::Str(v) => {
                let strings =
                    super::hdf5_access::to_varlen(v).map_err(|p| ctx.format(element, p))?;
                write_field(&ds, &strings)
            }
        };
        FIELD_NAME.with(|n| n.borrow_mut().clear());
        written.map_err(ctx.h5(element))?;
    }
    Ok(ds)
}

fn write_field<T: H5Type + Clone>(ds: &Dataset, values: &[T]) -> hdf5::Result<()> {
    let wrapped: Vec<Field<T>> = values.iter().cloned().map(Field).collect();
    ds.write_raw(&wrapped)
}
