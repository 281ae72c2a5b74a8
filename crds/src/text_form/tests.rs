//! The text forms' specification, as tests.

use super::*;

const LARGEST: u64 = i64::MAX as u64;

/// SplitMix64: a small deterministic generator, so failures repeat.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// An ID below 2^63, with a random bit length so that short ones occur too.
    fn id(&mut self) -> u64 {
        let bits = self.next() % 64;
        (self.next() >> 1) >> (63 - bits.min(63))
    }
}

fn random_ids(count: usize) -> Vec<u64> {
    let mut rng = SplitMix(20_261_124);
    (0..count).map(|_| rng.id()).collect()
}

#[test]
fn every_form_reads_back_what_it_writes_from_0_to_2_to_the_63_minus_1() {
    let edges = [0, 1, 9, 10, 31, 32, 61, 62, (1 << 53) - 1, 1 << 53, LARGEST];
    for form in TextForm::ALL {
        for id in edges.into_iter().chain(random_ids(2000)) {
            let text = form.encode(id);
            assert_eq!(form.parse(&text), Ok(id), "{form} {text}");
            let mut bytes = b"x".to_vec();
            form.encode_to(id, &mut bytes);
            assert_eq!(&bytes[1..], text.as_bytes(), "{form} {id}");
        }
    }
}

#[test]
fn compact_forms_have_a_fixed_width_and_decimal_has_none() {
    for id in [0, 1, 1 << 40, LARGEST, u64::MAX] {
        assert_eq!(TextForm::Base32.encode(id).len(), 13, "{id}");
        assert_eq!(TextForm::Base62.encode(id).len(), 11, "{id}");
    }
    assert_eq!(TextForm::Decimal.encode(0), "0");
    assert_eq!(TextForm::Decimal.encode(LARGEST), "9223372036854775807");
    assert_eq!(TextForm::Decimal.encode(u64::MAX), "18446744073709551615");
}

/// What a database index or `sort` sees: the texts' byte order.
#[test]
fn fixed_width_texts_sort_byte_by_byte_exactly_like_their_ids() {
    let mut ids = random_ids(5000);
    ids.extend([0, 1, 31, 32, 61, 62, LARGEST]);
    ids.sort_unstable();
    ids.dedup();
    for form in [TextForm::Base32, TextForm::Base62] {
        let mut texts: Vec<String> = ids.iter().map(|id| form.encode(*id)).collect();
        texts.reverse();
        texts.sort_unstable();
        let back: Vec<u64> = texts.iter().map(|t| form.parse(t).unwrap()).collect();
        assert_eq!(back, ids, "{form}");
    }
}

/// Worked out by hand, independently of `encode`.
#[test]
fn known_ids_have_the_texts_worked_out_by_hand() {
    // 2^63-1 is 63 one-bits. 13 base32 characters hold 65 bits: the first takes the top
    // 5 bits, 00111 = 7, and each of the other 12 takes 11111 = 31 = Z.
    assert_eq!(TextForm::Base32.encode(LARGEST), "7ZZZZZZZZZZZZ");
    // 2^53-1 is 53 one-bits: 10 Zs (50 bits), 111 = 7 before them, two zeros of padding.
    assert_eq!(TextForm::Base32.encode((1 << 53) - 1), "007ZZZZZZZZZZ");
    // 32 = 1 * 32 + 0; Crockford's digit 18 is J (no I), 27 is V (no U).
    assert_eq!(TextForm::Base32.encode(32), "0000000000010");
    assert_eq!(TextForm::Base32.encode(18), "000000000000J");
    assert_eq!(TextForm::Base32.encode(27), "000000000000V");
    // 2^63-1 in base62: the digits of "AzL8n0Y58m7" are A=10 z=61 L=21 8 n=49 0 Y=34 5 8
    // m=48 7; summing digit * 62^place gives the number back.
    let digits = [10u128, 61, 21, 8, 49, 0, 34, 5, 8, 48, 7];
    let sum = digits.iter().fold(0u128, |acc, d| acc * 62 + d);
    assert_eq!(sum, u128::from(LARGEST));
    assert_eq!(TextForm::Base62.encode(LARGEST), "AzL8n0Y58m7");
    // 62 = 1 * 62 + 0, 61 is the last digit, z.
    assert_eq!(TextForm::Base62.encode(62), "00000000010");
    assert_eq!(TextForm::Base62.encode(61), "0000000000z");
}

#[test]
fn leading_zeros_may_be_left_out_when_reading() {
    assert_eq!(TextForm::Base32.parse("10"), Ok(32));
    assert_eq!(TextForm::Base32.parse("0"), Ok(0));
    assert_eq!(TextForm::Base62.parse("z"), Ok(61));
    assert_eq!(
        TextForm::Decimal.parse("00000000000000000000000042"),
        Ok(42)
    );
}

#[test]
fn base32_reads_any_case_and_crockfords_look_alikes() {
    assert_eq!(
        TextForm::Base32.parse("06y45hnz00000"),
        TextForm::Base32.parse("06Y45HNZ00000")
    );
    assert_eq!(TextForm::Base32.parse("1"), TextForm::Base32.parse("i"));
    assert_eq!(TextForm::Base32.parse("1"), TextForm::Base32.parse("L"));
    assert_eq!(TextForm::Base32.parse("10"), TextForm::Base32.parse("lO"));
    assert_eq!(TextForm::Base32.parse("7zzzzzzzzzzzz"), Ok(LARGEST));
}

#[test]
fn base62_is_case_sensitive() {
    assert_eq!(TextForm::Base62.parse("A"), Ok(10));
    assert_eq!(TextForm::Base62.parse("a"), Ok(36));
}

#[test]
fn a_character_outside_the_alphabet_is_named_with_its_position_and_the_digits() {
    let err = TextForm::Base32.parse("06Y45HNU00000").unwrap_err();
    assert_eq!(
        err,
        TextFormError::BadCharacter {
            form: TextForm::Base32,
            text: "06Y45HNU00000".into(),
            character: 'U',
            position: 8,
        }
    );
    let message = err.to_string();
    assert!(message.contains("'U' (character 8)"), "{message}");
    assert!(message.contains("without I, L, O and U"), "{message}");
    for (form, text, bad) in [
        (TextForm::Base32, "0-1", '-'),
        (TextForm::Base32, " 1", ' '),
        (TextForm::Base32, "1é", 'é'),
        (TextForm::Base62, "AzL8n0Y58m+", '+'),
        (TextForm::Base62, "_", '_'),
        (TextForm::Decimal, "+5", '+'),
        (TextForm::Decimal, "-5", '-'),
        (TextForm::Decimal, "12abc", 'a'),
    ] {
        match form.parse(text) {
            Err(TextFormError::BadCharacter { character, .. }) => {
                assert_eq!(character, bad, "{form} {text}");
            }
            other => panic!("{form} {text:?}: {other:?}"),
        }
    }
    let message = TextForm::Base62.parse("a.b").unwrap_err().to_string();
    assert!(
        message.contains("0-9, A-Z and a-z (case matters)"),
        "{message}"
    );
}

#[test]
fn an_empty_text_is_refused() {
    for form in TextForm::ALL {
        assert_eq!(form.parse(""), Err(TextFormError::Empty { form }));
    }
    assert_eq!(
        TextForm::Base62.parse("").unwrap_err().to_string(),
        "an empty text is not a base62 ID"
    );
}

#[test]
fn texts_longer_than_the_width_are_refused_even_with_leading_zeros() {
    let err = TextForm::Base32.parse("00000000000001").unwrap_err();
    assert_eq!(
        err.to_string(),
        "\"00000000000001\" is not a base32 ID: it has 14 characters, but base32 IDs have \
         at most 13"
    );
    // A decimal ID given where base32 was expected: too long, not too large.
    assert!(matches!(
        TextForm::Base32.parse("250096622069874688"),
        Err(TextFormError::TooLong { length: 18, .. })
    ));
    assert!(matches!(
        TextForm::Base62.parse("000000000001"),
        Err(TextFormError::TooLong {
            length: 12,
            width: 11,
            ..
        })
    ));
}

#[test]
fn values_of_2_to_the_63_or_more_are_refused_naming_the_largest_id() {
    for (form, text) in [
        (TextForm::Base32, "8000000000000"),
        (TextForm::Base32, "ZZZZZZZZZZZZZ"),
        (TextForm::Base62, "AzL8n0Y58m8"),
        (TextForm::Base62, "zzzzzzzzzzz"),
        (TextForm::Decimal, "9223372036854775808"),
        (TextForm::Decimal, "99999999999999999999999999"),
    ] {
        let err = form.parse(text).unwrap_err();
        assert!(
            matches!(err, TextFormError::TooLarge { .. }),
            "{form} {text}"
        );
        let largest = form.encode(LARGEST);
        let message = err.to_string();
        assert!(
            message.ends_with(&format!("2^63 or more, and the largest ID is {largest}")),
            "{message}"
        );
    }
    // What a compact form writes for a value above every ID does not read back.
    assert!(
        TextForm::Base62
            .parse(&TextForm::Base62.encode(u64::MAX))
            .is_err()
    );
}

#[test]
fn forms_are_named_decimal_base32_and_base62_and_other_names_list_them() {
    for form in TextForm::ALL {
        assert_eq!(form.name().parse::<TextForm>(), Ok(form));
        assert_eq!(form.to_string(), form.name());
    }
    assert_eq!(TextForm::names(), ["decimal", "base32", "base62"]);
    assert_eq!(TextForm::default(), TextForm::Decimal);
    for bad in ["", "Base32", "hex", "base64", "crockford"] {
        let err = bad.parse::<TextForm>().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{bad:?} is not a text form of IDs: use decimal, base32 or base62")
        );
    }
}
