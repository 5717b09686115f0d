//! MIG geometry: GPU models, profiles, placements, layouts, the 12 configurations, and
//! transition plans between layouts.

pub mod catalogue;
pub mod configuration;
pub mod enumerate;
pub mod layout;
pub mod plan;

pub use catalogue::{Catalogue, CatalogueError, GpuModel, Kind, Profile, ProfileId};
pub use configuration::{identify, resolve_configurations, Configuration};
pub use enumerate::maximal_layouts;
pub use layout::{Driver, Instance, InstanceRecord, Layout, LayoutError};
pub use plan::{DriverError, DriverModel, Plan, Step};
