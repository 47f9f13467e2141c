//! nfx-control (see DESIGN.md).
