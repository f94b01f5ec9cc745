"""An independent NumPy transcription of the Chassagnole et al. (2002) model, from the
curated BioModels entry BIOMD0000000051 (its own state order and parameter names), for
checking `jaxident.models.EcoliChassagnole` against SciPy's LSODA."""

import numpy as np


P = dict(
    rmaxPTS=7829.78,
    KPTSa1=3082.3,
    KPTSa2=0.01,
    KPTSa3=245.3,
    nPTSg6p=3.66,
    KPTSg6p=2.15,
    rmaxPGI=650.988,
    KPGIeq=0.1725,
    KPGIg6p=2.9,
    KPGIf6p=0.266,
    KPGIf6ppginh=0.2,
    KPGIg6ppginh=0.2,
    rmaxPGM=0.839824,
    KPGMeq=0.196,
    KPGMg6p=1.038,
    KPGMg1p=0.0136,
    rmaxG6PDH=1.3802,
    KG6PDHg6p=14.4,
    KG6PDHnadphg6pinh=6.43,
    KG6PDHnadp=0.0246,
    KG6PDHnadphnadpinh=0.01,
    rmaxPFK=1840.58,
    KPFKatps=0.123,
    KPFKadpc=4.14,
    KPFKf6ps=0.325,
    KPFKpep=3.26,
    KPFKadpb=3.89,
    KPFKampb=3.2,
    KPFKadpa=128,
    KPFKampa=19.1,
    LPFK=5.62907e6,
    nPFK=11.1,
    rmaxTA=10.8716,
    KTAeq=1.05,
    rmaxTKa=9.47338,
    KTKaeq=1.2,
    rmaxTKb=86.5586,
    KTKbeq=10,
    rmaxMurSynth=0.00043711,
    rmaxALDO=17.4146,
    kALDOeq=0.144,
    kALDOfdp=1.75,
    kALDOgap=0.088,
    VALDOblf=2,
    kALDOdhap=0.088,
    kALDOgapinh=0.6,
    rmaxGAPDH=921.594,
    KGAPDHeq=0.63,
    KGAPDHgap=0.683,
    KGAPDHpgp=1.04e-5,
    KGAPDHnad=0.252,
    KGAPDHnadh=1.09,
    rmaxTIS=68.6747,
    kTISeq=1.39,
    kTISdhap=2.8,
    kTISgap=0.3,
    rmaxTrpSynth=0.001037,
    rmaxG3PDH=0.0116204,
    KG3PDHdhap=1,
    rmaxPGK=3021.77,
    KPGKeq=1934.4,
    KPGKadp=0.185,
    KPGKatp=0.653,
    KPGKpgp=0.0468,
    KPGKpg3=0.473,
    rmaxSerSynth=0.0257121,
    KSerSynthpg3=1,
    rmaxPGluMu=89.0497,
    KPGluMueq=0.188,
    KPGluMupg3=0.2,
    KPGluMupg2=0.369,
    rmaxENO=330.448,
    KENOeq=6.73,
    KENOpg2=0.1,
    KENOpep=0.135,
    rmaxPK=0.0611315,
    KPKpep=0.31,
    nPK=4,
    LPK=1000,
    KPKatp=22.5,
    KPKfdp=0.19,
    KPKamp=0.2,
    KPKadp=0.26,
    rmaxpepCxylase=0.107021,
    KpepCxylasefdp=0.7,
    npepCxylasefdp=4.21,
    KpepCxylasepep=4.07,
    rmaxSynth1=0.019539,
    KSynth1pep=1,
    rmaxSynth2=0.0736186,
    KSynth2pyr=1,
    rmaxDAHPS=0.107953,
    nDAHPSe4p=2.6,
    nDAHPSpep=2.2,
    KDAHPSe4p=0.035,
    KDAHPSpep=0.0053,
    rmaxPDH=6.05953,
    nPDH=3.68,
    KPDHpyr=1159,
    rmaxMetSynth=0.0022627,
    rmaxPGDH=16.2324,
    KPGDHpg=37.5,
    KPGDHnadp=0.0506,
    KPGDHnadphinh=0.0138,
    KPGDHatpinh=208,
    rmaxR5PI=4.83841,
    KR5PIeq=4,
    rmaxRu5P=6.73903,
    KRu5Peq=1.4,
    rmaxRPPK=0.0129005,
    KRPPKrib5p=0.1,
    rmaxG1PAT=0.00752546,
    KG1PATfdp=0.119,
    nG1PATfdp=1.2,
    KG1PATatp=4.42,
    KG1PATg1p=3.2,
)
assert len(P) == 116, len(P)
mu = 2.78e-5
D = 2.78e-5
cfeed = 110.96
names = [
    "pep",
    "glcex",
    "g6p",
    "pyr",
    "f6p",
    "g1p",
    "pg",
    "fdp",
    "sed7p",
    "gap",
    "e4p",
    "xyl5p",
    "rib5p",
    "dhap",
    "pgp",
    "pg3",
    "pg2",
    "ribu5p",
]
x0 = np.array(
    [
        2.67,
        2,
        3.48,
        2.67,
        0.6,
        0.653,
        0.808,
        0.272,
        0.276,
        0.218,
        0.098,
        0.138,
        0.398,
        0.167,
        0.008,
        2.13,
        0.399,
        0.111,
    ]
)


def co(t):
    atp = 4.27 - 4.163 * (t / (0.657 + 1.43 * t + 0.0364 * t**2))
    adp = 0.582 + 1.73 * 2.731 ** (-0.15 * t) * (0.12 * t + 0.000214 * t**3)
    amp = 0.123 + 7.25 * (t / (7.25 + 1.47 * t + 0.17 * t**2)) + 1.073 / (1.29 + 8.05 * t)
    nadph = 0.062 + 0.332 * 2.718 ** (-0.464 * t) * (
        0.0166 * t**1.58
        + 0.000166 * t**4.73
        + 0.1312e-9 * t**7.89
        + 0.1362e-12 * t**11
        + 0.1233e-15 * t**14.2
    )
    nadp = 0.159 - 0.00554 * (t / (2.8 - 0.271 * t + 0.01 * t**2)) + 0.182 / (4.82 + 0.526 * t)
    nadh = 0.0934 + 0.00111 * 2.371 ** (-0.123 * t) * (0.844 * t + 0.104 * t**3)
    nad = (
        1.314
        + 1.314 * 2.73 ** (-0.0435 * t - 0.342)
        - (t + 7.871) * (2.73 ** (-0.0218 * t - 0.171) / (8.481 + t))
    )
    return atp, adp, amp, nadph, nadp, nadh, nad


def rhs(t, x, p=P, verbose=False):
    (
        pep,
        glcex,
        g6p,
        pyr,
        f6p,
        g1p,
        pg,
        fdp,
        sed7p,
        gap,
        e4p,
        xyl5p,
        rib5p,
        dhap,
        pgp,
        pg3,
        pg2,
        ribu5p,
    ) = x
    atp, adp, amp, nadph, nadp, nadh, nad = co(t)
    q = p
    vPTS = (
        q["rmaxPTS"]
        * glcex
        * (pep / pyr)
        / (
            (q["KPTSa1"] + q["KPTSa2"] * (pep / pyr) + q["KPTSa3"] * glcex + glcex * (pep / pyr))
            * (1 + g6p ** q["nPTSg6p"] / q["KPTSg6p"])
        )
    )
    vPGI = (
        q["rmaxPGI"]
        * (g6p - f6p / q["KPGIeq"])
        / (
            q["KPGIg6p"]
            * (1 + f6p / (q["KPGIf6p"] * (1 + pg / q["KPGIf6ppginh"])) + pg / q["KPGIg6ppginh"])
            + g6p
        )
    )
    vPGM = (
        q["rmaxPGM"] * (g6p - g1p / q["KPGMeq"]) / (q["KPGMg6p"] * (1 + g1p / q["KPGMg1p"]) + g6p)
    )
    vG6PDH = (
        q["rmaxG6PDH"]
        * g6p
        * nadp
        / (
            (g6p + q["KG6PDHg6p"])
            * (1 + nadph / q["KG6PDHnadphg6pinh"])
            * (q["KG6PDHnadp"] * (1 + nadph / q["KG6PDHnadphnadpinh"]) + nadp)
        )
    )
    A = 1 + adp / q["KPFKadpa"] + amp / q["KPFKampa"]
    B = 1 + pep / q["KPFKpep"] + adp / q["KPFKadpb"] + amp / q["KPFKampb"]
    vPFK = (
        q["rmaxPFK"]
        * atp
        * f6p
        / (
            (atp + q["KPFKatps"] * (1 + adp / q["KPFKadpc"]))
            * (f6p + q["KPFKf6ps"] * B / A)
            * (1 + q["LPFK"] / (1 + f6p * A / (q["KPFKf6ps"] * B)) ** q["nPFK"])
        )
    )
    vTA = q["rmaxTA"] * (gap * sed7p - e4p * f6p / q["KTAeq"])
    vTKA = q["rmaxTKa"] * (rib5p * xyl5p - sed7p * gap / q["KTKaeq"])
    vTKB = q["rmaxTKb"] * (xyl5p * e4p - f6p * gap / q["KTKbeq"])
    vMur = q["rmaxMurSynth"]
    vALDO = (
        q["rmaxALDO"]
        * (fdp - gap * dhap / q["kALDOeq"])
        / (
            q["kALDOfdp"]
            + fdp
            + q["kALDOgap"] * dhap / (q["kALDOeq"] * q["VALDOblf"])
            + q["kALDOdhap"] * gap / (q["kALDOeq"] * q["VALDOblf"])
            + fdp * gap / q["kALDOgapinh"]
            + gap * dhap / (q["VALDOblf"] * q["kALDOeq"])
        )
    )
    vGAPDH = (
        q["rmaxGAPDH"]
        * (gap * nad - pgp * nadh / q["KGAPDHeq"])
        / (
            (q["KGAPDHgap"] * (1 + pgp / q["KGAPDHpgp"]) + gap)
            * (q["KGAPDHnad"] * (1 + nadh / q["KGAPDHnadh"]) + nad)
        )
    )
    vTIS = (
        q["rmaxTIS"]
        * (dhap - gap / q["kTISeq"])
        / (q["kTISdhap"] * (1 + gap / q["kTISgap"]) + dhap)
    )
    vTrp = q["rmaxTrpSynth"]
    vG3PDH = q["rmaxG3PDH"] * dhap / (q["KG3PDHdhap"] + dhap)
    vPGK = (
        q["rmaxPGK"]
        * (adp * pgp - atp * pg3 / q["KPGKeq"])
        / (
            (q["KPGKadp"] * (1 + atp / q["KPGKatp"]) + adp)
            * (q["KPGKpgp"] * (1 + pg3 / q["KPGKpg3"]) + pgp)
        )
    )
    vSer = q["rmaxSerSynth"] * pg3 / (q["KSerSynthpg3"] + pg3)
    vPGluMu = (
        q["rmaxPGluMu"]
        * (pg3 - pg2 / q["KPGluMueq"])
        / (q["KPGluMupg3"] * (1 + pg2 / q["KPGluMupg2"]) + pg3)
    )
    vENO = (
        q["rmaxENO"] * (pg2 - pep / q["KENOeq"]) / (q["KENOpg2"] * (1 + pep / q["KENOpep"]) + pg2)
    )
    vPK = (
        q["rmaxPK"]
        * pep
        * (pep / q["KPKpep"] + 1) ** (q["nPK"] - 1)
        * adp
        / (
            q["KPKpep"]
            * (
                q["LPK"]
                * ((1 + atp / q["KPKatp"]) / (fdp / q["KPKfdp"] + amp / q["KPKamp"] + 1))
                ** q["nPK"]
                + (pep / q["KPKpep"] + 1) ** q["nPK"]
            )
            * (adp + q["KPKadp"])
        )
    )
    vPEPC = (
        q["rmaxpepCxylase"]
        * pep
        * (1 + (fdp / q["KpepCxylasefdp"]) ** q["npepCxylasefdp"])
        / (q["KpepCxylasepep"] + pep)
    )
    vS1 = q["rmaxSynth1"] * pep / (q["KSynth1pep"] + pep)
    vS2 = q["rmaxSynth2"] * pyr / (q["KSynth2pyr"] + pyr)
    vDAHPS = (
        q["rmaxDAHPS"]
        * e4p ** q["nDAHPSe4p"]
        * pep ** q["nDAHPSpep"]
        / ((q["KDAHPSe4p"] + e4p ** q["nDAHPSe4p"]) * (q["KDAHPSpep"] + pep ** q["nDAHPSpep"]))
    )
    vPDH = q["rmaxPDH"] * pyr ** q["nPDH"] / (q["KPDHpyr"] + pyr ** q["nPDH"])
    vMet = q["rmaxMetSynth"]
    vPGDH = (
        q["rmaxPGDH"]
        * pg
        * nadp
        / (
            (pg + q["KPGDHpg"])
            * (
                nadp
                + q["KPGDHnadp"] * (1 + nadph / q["KPGDHnadphinh"]) * (1 + atp / q["KPGDHatpinh"])
            )
        )
    )
    vR5PI = q["rmaxR5PI"] * (ribu5p - rib5p / q["KR5PIeq"])
    vRu5P = q["rmaxRu5P"] * (ribu5p - xyl5p / q["KRu5Peq"])
    vPPK = q["rmaxRPPK"] * rib5p / (q["KRPPKrib5p"] + rib5p)
    vG1PAT = (
        q["rmaxG1PAT"]
        * g1p
        * atp
        * (1 + (fdp / q["KG1PATfdp"]) ** q["nG1PATfdp"])
        / ((q["KG1PATatp"] + atp) * (q["KG1PATg1p"] + g1p))
    )
    if verbose:
        print(
            dict(
                PTS=65 * vPTS,
                PGI=vPGI,
                PFK=vPFK,
                G6PDH=vG6PDH,
                ALDO=vALDO,
                GAPDH=vGAPDH,
                PK=vPK,
                PDH=vPDH,
                ENO=vENO,
            )
        )
    d = dict(
        pep=-65 * vPTS + vENO - vPK - vPEPC - vS1 - vDAHPS - mu * pep,
        glcex=-vPTS + D * (cfeed - glcex),
        g6p=65 * vPTS - vPGI - vPGM - vG6PDH - mu * g6p,
        pyr=65 * vPTS + vTrp + vPK - vS2 - vPDH + vMet - mu * pyr,
        f6p=vPGI - vPFK + vTA + vTKB - 2 * vMur - mu * f6p,
        g1p=vPGM - vG1PAT - mu * g1p,
        pg=vG6PDH - vPGDH - mu * pg,
        fdp=vPFK - vALDO - mu * fdp,
        sed7p=-vTA + vTKA - mu * sed7p,
        gap=-vTA + vTKA + vTKB + vALDO - vGAPDH + vTIS + vTrp - mu * gap,
        e4p=vTA - vTKB - vDAHPS - mu * e4p,
        xyl5p=-vTKA - vTKB + vRu5P - mu * xyl5p,
        rib5p=-vTKA + vR5PI - vPPK - mu * rib5p,
        dhap=vALDO - vTIS - vG3PDH - mu * dhap,
        pgp=vGAPDH - vPGK - mu * pgp,
        pg3=vPGK - vSer - vPGluMu - mu * pg3,
        pg2=vPGluMu - vENO - mu * pg2,
        ribu5p=vPGDH - vR5PI - vRu5P - mu * ribu5p,
    )
    return np.array([d[n] for n in names])
