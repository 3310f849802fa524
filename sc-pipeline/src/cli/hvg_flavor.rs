//! `--hvg-flavor`: the names clap accepts and `--help` lists are those of sc-kernels' [`Flavor`].

use crate::steps::Flavor;
use clap::builder::PossibleValuesParser;

/// Accepts scanpy's flavour names, as [`Flavor::ALL`] lists them; anything else is refused by
/// clap with the list of possible values.
pub fn parser() -> PossibleValuesParser {
    PossibleValuesParser::new(Flavor::ALL.map(Flavor::name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::builder::TypedValueParser;

    #[test]
    fn every_flavor_is_offered_and_nothing_else() {
        let offered: Vec<String> = parser()
            .possible_values()
            .unwrap()
            .map(|v| v.get_name().to_string())
            .collect();
        assert_eq!(
            offered,
            ["cell_ranger", "seurat", "seurat_v3", "seurat_v3_paper"]
        );
        for name in &offered {
            assert!(Flavor::from_name(name).is_ok(), "{name}");
        }
    }
}
