//! nfx-tunnel (see DESIGN.md).
